"""A job spec as a Kubernetes JobSet queued by Kueue (`perdure export k8s`).

No side effects: `export_k8s` returns the documents and the gaps (what the JobSet cannot
express); the CLI validates, reports and writes. One replicatedJob per pool, each one Indexed
Job whose pods are the pool's replicas; the first pool's pod 0 is the primary.
"""

from __future__ import annotations

import math
import posixpath
import re
from dataclasses import dataclass
from typing import Any

import yaml

from perdure.core.launchenv import ReplicaFacts, contract_env
from perdure.core.spec import JobSpec, PoolSpec
from perdure.export.gaps import ExportError, Gap
from perdure.export.k8s_names import check_env, check_options, priority_class_name
from perdure.export.k8s_policy import map_failure_policy
from perdure.secrecy import is_secret, redact

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
KUEUE_API = "kueue.x-k8s.io/v1beta1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
MASTER_PORT = "29500"  # torchrun's default
# Set first in every container, from the downward API, so later values can say $(NAME).
POD_INDEX = "PERDURE_POD_INDEX"
RESTARTS = "PERDURE_JOBSET_RESTARTS"
RANK_OFFSET = "PERDURE_RANK_OFFSET"
_DOWNWARD = (
    (POD_INDEX, "metadata.annotations['batch.kubernetes.io/job-completion-index']"),
    (RESTARTS, "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"),
)
POD_CHECKPOINTS = "/var/tmp/perdure/checkpoints"
# A pool after the first numbers its ranks from an offset: Kubernetes cannot add in an env
# value, so a POSIX shell in the image does it, then runs the command.
_RANK_SCRIPT = f'RANK=$(({RANK_OFFSET} + {POD_INDEX})); export RANK GROUP_RANK="$RANK"; exec "$@"'
# procs_per_replica > 1: the pod (one replica, one torchrun "node") runs its local ranks under
# torchrun, which sets each one's LOCAL_RANK, RANK (GROUP_RANK x nproc + LOCAL_RANK) and
# WORLD_SIZE; one that fails ends the pod (no torchrun restarts: the JobSet's policy decides).
_TORCHRUN = ('exec python -m torch.distributed.run --nnodes="$GROUP_WORLD_SIZE" '
             '--nproc-per-node="$LOCAL_WORLD_SIZE" --node-rank="$GROUP_RANK" '
             '--master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" --max-restarts=0 '
             '--no-python "$@"')
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class K8sOptions:
    image: str
    queue: str | None = None  # Kueue LocalQueue; default: the spec's queue
    priority_class: str | None = None  # a WorkloadPriorityClass that exists in the cluster
    namespace: str | None = None


@dataclass(frozen=True)
class Export:
    documents: list[dict[str, Any]]  # a WorkloadPriorityClass when one is made, the JobSet last
    gaps: list[Gap]

    @property
    def jobset(self) -> dict[str, Any]:
        return self.documents[-1]


def literal(value: str) -> str:
    """`value` as Kubernetes passes it on: it expands `$(NAME)` and turns `$$` into `$`."""
    return re.sub(r"\$(?=[$(])", "$$", value)


def master_addr(spec: JobSpec) -> str:
    """The primary's pod: JobSet names it <jobset>-<replicatedJob>-<job>-<pod>.<subdomain>."""
    return f"{spec.name}-{spec.pools[0].name}-0-0.{spec.name}"


def _facts(spec: JobSpec, pool: PoolSpec, offset: int, ckpt: str) -> ReplicaFacts:
    index, restarts = f"$({POD_INDEX})", f"$({RESTARTS})"
    rank = index if offset == 0 else ""  # after the first pool: set by the rank script
    world = str(spec.total_procs)
    return ReplicaFacts(
        rank=rank,
        world_size=world,
        role_rank=index,
        master_addr=master_addr(spec),
        master_port=MASTER_PORT,
        run_id=f"{spec.name}-{restarts}",
        # Every JobSet restart recreates every pod: it is an attempt, a round and a restart.
        attempt=restarts,
        round=restarts,
        replica=f"{pool.name}-{index}",
        restart_count=restarts,
        job_id=spec.name,
        checkpoint_dir=literal(ckpt),  # a path or URL, never a reference to expand
        # One replica per pod, and each pod its own torchrun "group" (node).
        layout={"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": str(pool.procs_per_replica),
                "GROUP_RANK": rank, "GROUP_WORLD_SIZE": str(spec.total_replicas)},
    )


def _env(spec: JobSpec, pool: PoolSpec, offset: int, ckpt: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in _DOWNWARD
    ]
    if offset:
        env.append({"name": RANK_OFFSET, "value": str(offset)})
    user = {**spec.env, **pool.env}  # check_env refused any name the contract sets
    for name, value in contract_env(spec, pool, _facts(spec, pool, offset, ckpt)).items():
        if offset and name in ("RANK", "GROUP_RANK"):
            continue  # the rank script sets them
        if name in user and is_secret(name, user[name]):  # never in the manifest: a Secret
            env.append({"name": name, "valueFrom": {"secretKeyRef": {
                "name": credentials_secret(spec), "key": name}}})
            continue
        if name in user:
            value = literal(user[name])  # the user's text stays as written
        env.append({"name": name, "value": redact(value)})  # credentials never in a manifest
    return env


def perdure_names(spec: JobSpec) -> set[str]:
    """Every variable the export sets in a pod, whatever the user's env holds."""
    bare = spec.model_copy(update={"env": {}})
    names = {POD_INDEX, RESTARTS, RANK_OFFSET}
    for pool in spec.pools:
        facts = _facts(spec, pool, 0, "")
        names |= set(contract_env(bare, pool.model_copy(update={"env": {}}), facts))
    return names


def credentials_secret(spec: JobSpec) -> str:
    """The Secret a job's credential variables are read from in the pods."""
    return f"{spec.name}-credentials"


def credential_gaps(spec: JobSpec) -> list[Gap]:
    """Credential variables of the spec: read from a Secret the user creates, never written."""
    names = sorted({n for env in (spec.env, *(p.env for p in spec.pools))
                    for n, value in env.items() if is_secret(n, value)})
    if not names:
        return []
    keys = " ".join(f"--from-literal={n}=..." for n in names)
    return [Gap("env", f"{', '.join(names)} hold credentials and are not written into the "
                f"JobSet: the pods read them from the Secret {credentials_secret(spec)!r} "
                f"(kubectl create secret generic {credentials_secret(spec)} {keys}), or "
                "better, from the pods' cloud identity (IRSA, workload identity)")]


def _resources(pool: PoolSpec) -> dict[str, Any]:
    """A slot is one CPU (requested, not capped); memory_mb is both request and limit."""
    requests: dict[str, str] = {"cpu": str(pool.slots)}
    out: dict[str, Any] = {"requests": requests}
    limits: dict[str, str] = {}
    if pool.memory_mb is not None:
        requests["memory"] = f"{pool.memory_mb}Mi"
        limits["memory"] = f"{pool.memory_mb}Mi"
    if pool.gpus:  # an extended resource: the limit is what the device plugin allots
        limits[GPU_RESOURCE] = str(pool.gpus)
    if limits:
        out["limits"] = limits
    return out


def _container(spec: JobSpec, pool: PoolSpec, offset: int, ckpt: str, image: str) -> dict[str, Any]:
    argv = [literal(a) for a in pool.command]
    script = _RANK_SCRIPT if offset else ""
    if pool.procs_per_replica > 1:
        script = script.replace('exec "$@"', _TORCHRUN) if script else _TORCHRUN
    command = ["/bin/sh", "-c", literal(script), pool.name, *argv] if script else argv
    container: dict[str, Any] = {
        "name": pool.name,
        "image": image,
        "command": command,
        "env": _env(spec, pool, offset, ckpt),
        "resources": _resources(pool),
    }
    if spec.workdir is not None and posixpath.isabs(spec.workdir):
        container["workingDir"] = spec.workdir
    return container


def _replicated_job(
    spec: JobSpec, i: int, offset: int, ckpt: str, image: str, pod_rules: list[dict[str, Any]]
) -> dict[str, Any]:
    pool = spec.pools[i]
    job: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": pool.replicas,
        "parallelism": pool.replicas,
        "backoffLimit": 0,  # any failed pod fails the Job; the JobSet's policy decides
        "podFailurePolicy": {"rules": pod_rules},
    }
    if i == 0:
        job["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}  # the primary is done
    job["template"] = {
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": math.ceil(spec.preemption.grace_seconds),
            "containers": [_container(spec, pool, offset, ckpt, image)],
        }
    }
    return {"name": pool.name, "replicas": 1, "template": {"spec": job}}


def _priority(spec: JobSpec, opts: K8sOptions) -> tuple[str | None, list[dict[str, Any]]]:
    """The WorkloadPriorityClass to name, and the one to create for the spec's priority."""
    if opts.priority_class is not None:
        return opts.priority_class, []
    if spec.priority == 0:
        return None, []  # Kueue's default priority
    name = priority_class_name(spec.priority)
    wpc = {
        "apiVersion": KUEUE_API,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": spec.priority,
        "description": f"perdure job priority {spec.priority}",
    }
    return name, [wpc]


def export_k8s(spec: JobSpec, opts: K8sOptions) -> Export:
    """The JobSet (and WorkloadPriorityClass) for `spec`, and what they cannot express."""
    check_options(spec, opts.image, opts.queue, opts.priority_class, opts.namespace)
    check_env(spec, perdure_names(spec))
    procs = sorted({p.procs_per_replica for p in spec.pools})
    if len(procs) > 1:
        raise ExportError(f"pools: procs_per_replica differs between pools ({procs}); torchrun "
                          "numbers ranks as GROUP_RANK x nproc + LOCAL_RANK, so every pod "
                          "must run as many: give every pool the same procs_per_replica")
    policy = map_failure_policy(spec)
    ckpt, gaps = checkpoint_dir(spec)
    priority, extra = _priority(spec, opts)
    meta: dict[str, Any] = {"name": spec.name}
    if opts.namespace is not None:
        meta["namespace"] = opts.namespace
    meta["labels"] = {QUEUE_LABEL: opts.queue or spec.queue}
    if priority is not None:
        meta["labels"][PRIORITY_LABEL] = priority
    replicated, offset = [], 0
    for i, pool in enumerate(spec.pools):
        replicated.append(_replicated_job(spec, i, offset, ckpt, opts.image, policy.pod_rules))
        offset += pool.replicas
    jobset = {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": meta,
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "Any", "targetReplicatedJobs": [spec.pools[0].name]},
            "failurePolicy": {"maxRestarts": policy.max_restarts, "rules": policy.jobset_rules},
            "replicatedJobs": replicated,
        },
    }
    return Export([*extra, jobset], [*spec_gaps(spec), *gaps, *policy.gaps,
                                     *credential_gaps(spec)])


def checkpoint_dir(spec: JobSpec) -> tuple[str, list[Gap]]:
    """Where replicas checkpoint; a directory on the pod's own disk does not survive a restart."""
    where = spec.checkpoint.dir
    fix = "set checkpoint.dir to a URL every pod reaches (s3://bucket/path, gs://...)"
    if where is None:
        local = posixpath.join(POD_CHECKPOINTS, spec.name)
        return local, [Gap("checkpoint.dir", f"unset: checkpoints go to {local} on the pod's own "
                           f"disk and are lost when the JobSet recreates its pods; {fix}")]
    if "://" in where and not where.startswith("file://"):
        return where, []
    return where, [Gap("checkpoint.dir", f"{where!r} is on the pod's own disk (perdure mounts "
                       f"no volume there) and is lost when the JobSet recreates its pods; {fix}")]


def spec_gaps(spec: JobSpec) -> list[Gap]:
    """Spec fields a JobSet cannot express (the failure rules' gaps come from the policy)."""
    gaps = [
        Gap(f"pools.{i}.min_replicas", f"elastic resize cannot be expressed: a JobSet runs all "
            f"{p.replicas} replicas or restarts them all (elastic.mode {spec.elastic.mode} is "
            "dropped)")
        for i, p in enumerate(spec.pools) if p.min_replicas is not None
    ]
    for i, p in enumerate(spec.pools):
        if p.resume is not None:
            gaps.append(Gap(f"pools.{i}.resume", "a recreated pod runs its command as written "
                            "(nothing looks the checkpoint up first): make the script resume "
                            "by itself when its checkpoint exists"))
        if p.integrations:
            gaps.append(Gap(f"pools.{i}.integrations", "the pods' interpreter does not put "
                            "perdure's integration into the Trainer: add the framework's "
                            "PerdureCallback to the script"))
    if spec.restart.scope == "replica":
        gaps.append(Gap("restart.scope", "`replica` cannot be expressed: a failure recreates "
                        "every Job of the JobSet, as `group` does"))
    if spec.priority != 0:
        gaps.append(Gap("priority", "hot-swap (preempting a lower-priority job for capacity a "
                        "running job lost) is perdure's scheduler's; Kueue uses the priority to "
                        "order admission and to preempt as the ClusterQueue's policy allows"))
    if spec.workdir is not None and not posixpath.isabs(spec.workdir):
        gaps.append(Gap("workdir", f"{spec.workdir!r} is relative to the spec's directory, which "
                        "the image does not have; the container starts in the image's WORKDIR"))
    # perdure's controller settings that the spec gave explicitly and Kubernetes lacks
    if "placement_timeout_seconds" in spec.scheduling.model_fields_set:
        gaps.append(Gap("scheduling.placement_timeout_seconds", "Kueue has no per-job wait for "
                       "capacity (waitForPodsReady is the cluster's setting)"))
    for name in ("stop_grace_seconds", "round_grace_seconds"):
        if name in spec.restart.model_fields_set:
            gaps.append(Gap(f"restart.{name}", "a JobSet restart stops pods with "
                            "terminationGracePeriodSeconds (preemption.grace_seconds)"))
    return gaps


class _Dumper(yaml.SafeDumper):
    """Writes every value out in full: no `&id001` anchors for the rules every Job shares."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(documents: list[dict[str, Any]]) -> str:
    """The documents as one YAML stream, keys in the order Kubernetes users read them."""
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         width=4096)


__all__ = ["Export", "ExportError", "K8sOptions", "export_k8s", "to_yaml"]
