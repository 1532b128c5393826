"""The cluster file's `kubernetes` section (`backend: kubernetes`): which cluster, and what
every agent pod of an attempt is made with.

No side effects. Credentials never go here: a job's credential variables are read by its pods
from the Secret `<job name>-credentials` (env valueFrom secretKeyRef).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from perdure.core.specbase import SpecModel

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
# a label key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters
LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
OPERATORS = ("Exists", "Equal")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P|E|Ei)?\Z")


class KubernetesSpec(SpecModel):
    """`kubernetes:` of a cluster file."""

    kubeconfig: str | None = Field(None, description=(
        "null: $KUBECONFIG, else ~/.kube/config, else the pod's service account (in-cluster)"))
    context: str | None = Field(None, description=(
        "the kubeconfig's context; null: its current context"))
    namespace: str | None = Field(None, description=(
        "where the agent pods run; null: the context's, else default"))
    image: str = Field(min_length=1, description=(
        "the agent pods' image: Python, torch, perdure and the job's code"))
    service_account: str | None = Field(None, description=(
        "the agent pods' service account; null: none mounted"))
    node_selector: dict[str, str] = Field(default_factory=dict, description=(
        "labels a node must have (besides its hostname)"))
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description=(
        "the agent pods' tolerations (key, operator, value, effect, tolerationSeconds)"))
    resources: dict[str, dict[str, str | int]] | None = Field(None, description=(
        "each agent pod's requests and limits; null: a CPU per replica and its GPUs "
        "(nvidia.com/gpu)"))
    queue: str | None = Field(None, description=(
        "a Kueue LocalQueue (label kueue.x-k8s.io/queue-name): Kueue admits the pods; "
        "perdure's queues then take no quota"))

    @field_validator("namespace", "service_account", "queue")
    @classmethod
    def _dns_label(cls, v: str | None) -> str | None:
        if v is not None and not DNS_LABEL.match(v):
            raise ValueError("a Kubernetes name: lowercase letters, digits and '-', at most "
                             "63 characters, starting and ending with a letter or digit")
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if any(c.isspace() for c in v):
            raise ValueError("an image reference has no spaces (registry/name:tag)")
        return v

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
                raise ValueError(f"{key}: {value!r} is not a Kubernetes label (key: "
                                 "[prefix/]name, value: at most 63 letters, digits, '-_.')")
        return v

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, t in enumerate(v):
            extra = sorted(set(t) - TOLERATION_KEYS)
            if extra:
                raise ValueError(f"[{i}]: unknown field(s) {extra}; a toleration has "
                                 f"{sorted(TOLERATION_KEYS)}")
            if t.get("operator", "Equal") not in OPERATORS:
                raise ValueError(f"[{i}].operator: use one of {list(OPERATORS)}")
            if "effect" in t and t["effect"] not in EFFECTS:
                raise ValueError(f"[{i}].effect: use one of {list(EFFECTS)}")
            if not all(isinstance(t.get(k, ""), str) for k in ("key", "value")):
                raise ValueError(f"[{i}]: key and value are strings")
        return v

    @field_validator("resources")
    @classmethod
    def _resources(cls, v: dict[str, dict[str, str | int]] | None
                   ) -> dict[str, dict[str, str | int]] | None:
        for part, amounts in (v or {}).items():
            if part not in ("requests", "limits"):
                raise ValueError(f"{part}: use requests and limits (each resource: amount)")
            for name, amount in amounts.items():
                if not QUANTITY.match(str(amount)):
                    raise ValueError(f"{part}.{name}: {amount!r} is not a Kubernetes quantity "
                                     "(e.g. 2, 500m, 8Gi)")
        return v
