"""An attempt's agent pods (one per job, attempt and node): their names, labels and manifest,
and what a pod's or a node's status says. Labels let a restarted controller find its pods;
the node and the whole job id are annotations (a label holds 63 characters). No side effects.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Any

from perdure.core.k8sspec import KubernetesSpec

STATE_LABEL = "perdure.dev/state"
JOB_LABEL = "perdure.dev/job"
ATTEMPT_LABEL = "perdure.dev/attempt"
JOB_ANNOTATION = "perdure.dev/job-id"
NODE_ANNOTATION = "perdure.dev/node"
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
HOSTNAME_LABEL = "kubernetes.io/hostname"
AGENT_SECRET_KEY = "secret"
POD_ENV = "PERDURE_K8S_POD"
GRACE_MARGIN = 15  # seconds of a pod's termination grace beyond the job's own
CONTAINER = "agent"


def state_tag(state_dir: str) -> str:
    return hashlib.sha256(state_dir.encode()).hexdigest()[:10]


def agent_secret_name(tag: str) -> str:
    return f"perdure-{tag}-agents"


def credentials_secret(job_name: str) -> str:
    """The Secret a job's credential variables are read from (as `perdure export k8s`)."""
    return f"{job_name}-credentials"


def _label(text: str) -> str:
    text = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63].strip("-_.")
    return text or "x"


def pod_name(job_id: str, attempt: str) -> str:
    """A new pod's name, with a random tail: a replacement never meets one terminating."""
    head = re.sub(r"[^a-z0-9-]", "-", job_id.lower())[:40].strip("-") or "job"
    return f"perdure-{head}-{attempt}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class PodPlan:

    name: str
    tag: str
    job_id: str
    attempt: str
    node: str
    command: list[str]
    cpus: int
    gpus: int
    grace: float
    credentials: tuple[str, ...] = ()  # variable names read from the job's Secret
    job_name: str = ""
    host_dirs: tuple[str, ...] = ()  # each "PATH" (read-write) or "PATH:ro"
    env: tuple[tuple[str, str], ...] = ()


def _resources(spec: KubernetesSpec, plan: PodPlan) -> dict[str, Any]:
    if spec.resources is not None:
        return {k: {n: str(a) for n, a in v.items()} for k, v in spec.resources.items()}
    out: dict[str, Any] = {"requests": {"cpu": str(plan.cpus)}}
    if plan.gpus:
        out["limits"] = {"nvidia.com/gpu": str(plan.gpus)}
    return out


def manifest(spec: KubernetesSpec, plan: PodPlan) -> dict[str, Any]:
    """The agent pod of `plan`: pinned to its node, on the node's network, sharing one
    process namespace (the pause process reaps what the agent's children leave)."""
    labels = {STATE_LABEL: plan.tag, JOB_LABEL: _label(plan.job_id),
              ATTEMPT_LABEL: _label(plan.attempt)}
    if spec.queue:
        labels[KUEUE_LABEL] = spec.queue
    env: list[dict[str, Any]] = [
        {"name": POD_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "PERDURE_SLURM_SECRET", "valueFrom": {"secretKeyRef": {
            "name": agent_secret_name(plan.tag), "key": AGENT_SECRET_KEY}}},
        *({"name": k, "value": v} for k, v in plan.env),
        *({"name": n, "valueFrom": {"secretKeyRef": {
            "name": credentials_secret(plan.job_name), "key": n}}} for n in plan.credentials),
    ]
    dirs = [(d.removesuffix(":ro"), d.endswith(":ro")) for d in plan.host_dirs]
    volumes = [{"name": f"host{i}", "hostPath": {"path": d, "type": "Directory"}}
               for i, (d, _) in enumerate(dirs)]
    mounts = [{"name": f"host{i}", "mountPath": d, "readOnly": ro}
              for i, (d, ro) in enumerate(dirs)]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostNetwork": True,
        "dnsPolicy": "Default",
        "shareProcessNamespace": True,
        "terminationGracePeriodSeconds": int(plan.grace) + GRACE_MARGIN,
        "nodeSelector": {**spec.node_selector, HOSTNAME_LABEL: plan.node},
        "tolerations": list(spec.tolerations),
        "automountServiceAccountToken": spec.service_account is not None,
        "containers": [{"name": CONTAINER, "image": spec.image,
                        "imagePullPolicy": "IfNotPresent", "command": plan.command,
                        "env": env, "resources": _resources(spec, plan),
                        "volumeMounts": mounts}],
        "volumes": volumes,
    }
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": plan.name, "labels": labels,
                         "annotations": {JOB_ANNOTATION: plan.job_id,
                                         NODE_ANNOTATION: plan.node}},
            "spec": pod_spec}


# ---- reading status ------------------------------------------------------------------------

def phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def terminating(pod: dict[str, Any]) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def graceful(pod: dict[str, Any]) -> bool:
    """Deleted with a grace period (an eviction, a drain); a force delete is a loss."""
    return terminating(pod) and int(pod["metadata"].get("deletionGracePeriodSeconds") or 0) > 0


def waiting_reason(pod: dict[str, Any]) -> str:
    """Why a Pending pod waits, in Kubernetes' words ("" when it does not say)."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") not in (None, "ContainerCreating"):
            return f"{waiting['reason']}: {waiting.get('message', '')}".strip(": ")
    if (pod.get("spec") or {}).get("schedulingGates"):
        return "SchedulingGated: waiting for admission (Kueue)"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{cond.get('reason', 'Unschedulable')}: {cond.get('message', '')}".strip(
                ": ")
    return ""


CONFIG_ERRORS = ("CreateContainerConfigError", "InvalidImageName", "ErrImageNeverPull")


def config_error(pod: dict[str, Any]) -> str | None:
    """A waiting reason no wait cures (a Secret or an image missing)."""
    reason = waiting_reason(pod)
    return reason if reason.split(":")[0] in CONFIG_ERRORS else None


def node_ready(node: dict[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def unschedulable(node: dict[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def quantity(text: str) -> int:
    """A CPU or count quantity as a whole number (500m -> 0, 2 -> 2, 1k -> 1000)."""
    text = str(text)
    if text.endswith("m"):
        return int(float(text[:-1]) // 1000)
    scale = {"k": 10**3, "M": 10**6, "G": 10**9}.get(text[-1:], 1)
    return int(float(text.rstrip("kMG") or 0) * scale)


def node_address(node: dict[str, Any]) -> str | None:
    for a in (node.get("status") or {}).get("addresses") or []:
        if a.get("type") == "InternalIP":
            return str(a.get("address"))
    return None


def pod_gpus(chosen: str, seen: dict[str, int]) -> str:
    """A replica's CUDA_VISIBLE_DEVICES in its pod, which sees its GPUs as 0..N-1: each of
    the node's ids (`chosen`) keeps its position in `seen`, so a restart gets the same one."""
    out = []
    for word in (w.strip() for w in chosen.split(",") if w.strip()):
        out.append(str(seen.setdefault(word, len(seen))))
    return ",".join(out)
