"""perdure's typed model of every field it emits in a JobSet (jobset.x-k8s.io/v1alpha2) and a
Kueue WorkloadPriorityClass: an unknown field or a wrong type is rejected with its path.

No side effects. Field names are the API's own (camelCase), so a path reads as in the YAML.
The model knows only what perdure emits; Kubernetes' full schemas are checked apart
(k8s_schema), where installed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perdure.export.gaps import ExportError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Metadata(_Strict):
    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class FieldRef(_Strict):
    fieldPath: str


class SecretKeyRef(_Strict):
    name: str
    key: str


class EnvSource(_Strict):
    fieldRef: FieldRef | None = None
    secretKeyRef: SecretKeyRef | None = None  # credentials: never written into the manifest


class EnvVar(_Strict):
    name: str
    value: str | None = None
    valueFrom: EnvSource | None = None


class Resources(_Strict):
    requests: dict[str, str]
    limits: dict[str, str] | None = None


class Container(_Strict):
    name: str
    image: str
    command: list[str] = Field(min_length=1)
    env: list[EnvVar]
    resources: Resources
    workingDir: str | None = None


class PodSpec(_Strict):
    restartPolicy: Literal["Never"]
    terminationGracePeriodSeconds: int = Field(ge=0)
    containers: list[Container] = Field(min_length=1, max_length=1)


class PodTemplate(_Strict):
    spec: PodSpec


class OnExitCodes(_Strict):
    operator: Literal["In"]
    values: list[int] = Field(min_length=1, max_length=255)


class PodCondition(_Strict):
    type: str
    status: Literal["True", "False", "Unknown"]


class PodFailureRule(_Strict):
    action: Literal["FailJob"]
    onExitCodes: OnExitCodes | None = None
    onPodConditions: list[PodCondition] | None = None


class PodFailurePolicy(_Strict):
    rules: list[PodFailureRule] = Field(max_length=20)


class JobSuccessRule(_Strict):
    succeededIndexes: str


class JobSuccessPolicy(_Strict):
    rules: list[JobSuccessRule] = Field(min_length=1, max_length=20)


class JobSpecK8s(_Strict):
    completionMode: Literal["Indexed"]
    completions: int = Field(ge=1)
    parallelism: int = Field(ge=1)
    backoffLimit: int = Field(ge=0)
    podFailurePolicy: PodFailurePolicy
    successPolicy: JobSuccessPolicy | None = None
    template: PodTemplate


class JobTemplate(_Strict):
    spec: JobSpecK8s


class ReplicatedJob(_Strict):
    name: str
    replicas: int = Field(ge=0)
    template: JobTemplate


class Network(_Strict):
    enableDNSHostnames: bool
    publishNotReadyAddresses: bool


class SuccessPolicy(_Strict):
    operator: Literal["All", "Any"]
    targetReplicatedJobs: list[str]


Action = Literal[
    "FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "RestartJob",
    "RestartJobAndIgnoreMaxRestarts",
]


class FailureRule(_Strict):
    name: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    action: Action
    onJobFailureReasons: list[str]
    onJobFailureMessagePatterns: list[str]


class FailurePolicy(_Strict):
    maxRestarts: int = Field(ge=0, le=2**31 - 1)
    rules: list[FailureRule]


class JobSetSpec(_Strict):
    network: Network
    successPolicy: SuccessPolicy
    failurePolicy: FailurePolicy
    replicatedJobs: list[ReplicatedJob] = Field(min_length=1)


class JobSet(_Strict):
    apiVersion: Literal["jobset.x-k8s.io/v1alpha2"]
    kind: Literal["JobSet"]
    metadata: Metadata
    spec: JobSetSpec


class WorkloadPriorityClass(_Strict):
    apiVersion: Literal["kueue.x-k8s.io/v1beta1"]
    kind: Literal["WorkloadPriorityClass"]
    metadata: Metadata
    value: int = Field(ge=-(2**31), le=2**31 - 1)
    description: str | None = None


_MODELS: dict[str, type[_Strict]] = {
    "JobSet": JobSet, "WorkloadPriorityClass": WorkloadPriorityClass,
}


def path_of(loc: tuple[int | str, ...] | list[Any]) -> str:
    """`spec.replicatedJobs[0].template` from a location ("spec", "replicatedJobs", 0, ...)."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def check_document(doc: dict[str, Any]) -> None:
    """Raise ExportError naming the first field of `doc` that perdure's model rejects."""
    kind = doc.get("kind")
    model = _MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ExportError(f"kind: {kind!r} is not one perdure emits ({sorted(_MODELS)})")
    try:
        model.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        what = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ExportError(f"{kind} {path_of(first['loc'])}: {what}{more}") from None
