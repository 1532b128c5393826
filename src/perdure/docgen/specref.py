"""The spec reference: every job-spec and cluster-file field, generated from the models.

A field's description is its pydantic `description=`, else an entry of DESCRIPTIONS (a field
with neither shows as undocumented, and a test fails on it). No side effects.
"""

from __future__ import annotations

import json
import types
import typing
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from perdure.core.clusterspec import ClusterSpec
from perdure.core.spec import JobSpec
from perdure.core.specbase import model_in

UNDOCUMENTED = "(undocumented)"

DESCRIPTIONS: dict[str, str] = {
    # ---- job spec
    "name": "the job's name: lowercase letters, digits and `-`, at most 48 characters",
    "queue": "the queue (cluster file `queues`) whose quota the job counts against",
    "priority": "higher runs first; a job that lost capacity may preempt a lower one",
    "pools": "groups of identical replicas (at most 64 pools, 16,384 replicas in all); the "
             "first pool's replica 0 is the primary: its exit 0 ends the job as SUCCEEDED",
    "pools[].name": "the pool's name (replicas are `<pool>-<index>`), at most 32 characters",
    "pools[].replicas": "how many replicas (processes; ranks in the job's order of pools)",
    "pools[].min_replicas": "makes the pool elastic: the job goes on while this many are up",
    "pools[].grace": "seconds the pool's replicas get to end by themselves once the primary "
                     "succeeded (shown `finished`); then they are stopped",
    "pools[].spares": "whole free nodes the attempt holds warm: a lost node's replicas are "
                      "placed on one at once, and another is sought",
    "pools[].command": "argv, not a shell string; a leading `python` is perdure's interpreter",
    "pools[].slots": "the capacity one replica takes on its node (cluster file `slots`)",
    "pools[].memory_mb": "a replica over this is killed: OUT_OF_MEMORY",
    "pools[].env": "environment variables of this pool's replicas (over the job's `env`)",
    "env": "environment variables of every replica; torchrun's and perdure's own names win",
    "workdir": "the replicas' working directory, relative to the spec's directory",
    "restart": "the failure policy's budgets and rules",
    "restart.max_replica_restarts": "restarts in place per replica before the job is retried",
    "restart.max_job_retries": "new attempts of the whole job before it fails",
    "restart.transient_exit_codes": "exit codes and signals that retry the job at once",
    "restart.rules": "rules matched before the defaults; every condition given must hold",
    "restart.rules[].exit_codes": "match these exit codes",
    "restart.rules[].signals": "match these signals (numbers)",
    "restart.rules[].exception": "match an uncaught exception of this type name",
    "restart.rules[].message_contains": "match an exception message containing this text",
    "restart.rules[].action": "what to do on a match",
    "restart.scope": "`group`: a restart relaunches every replica (torchrun's way); "
                     "`replica`: only the failed one",
    "restart.stop_grace_seconds": "SIGTERM to SIGKILL when replicas are stopped",
    "restart.round_grace_seconds": "the same for the survivors of a failed peer",
    "scheduling": "placement",
    "scheduling.placement_timeout_seconds": "how long a job waits for capacity before the "
                                            "attempt fails as INSUFFICIENT_CAPACITY",
    "elastic": "what an elastic pool does when it loses replicas",
    "elastic.mode": "`resize`: go on with the survivors; `pause`: wait for all",
    "checkpoint": "where and how often the runtime's `Checkpointer` saves",
    "checkpoint.dir": "a path (relative to the spec) or URL (`s3://BUCKET/...`, `gs://`, "
                      "`file://`, `memory://`), never with credentials in it; default: the "
                      "state dir's `checkpoints/<job>`",
    "checkpoint.every": "`auto`: the interval from data (Young/Daly)",
    "checkpoint.every_steps": "save every N steps (`Checkpointer.maybe_save`)",
    "checkpoint.every_seconds": "save every S seconds",
    "checkpoint.max_interval_seconds": "never longer than this between checkpoints",
    "preemption": "preemption notices",
    "preemption.grace_seconds": "time a replica has to save and exit after a notice",
    "watchdog": "hung jobs and stragglers",
    "watchdog.hang_seconds": "no rank advances this long: HANG (`auto`: max(120, 20 x the "
                             "p99 step time))",
    "watchdog.stragglers": "what to do with a replica much slower than the others",
    # ---- cluster file
    "backend": "where replicas run",
    "address": "not used (older cluster files still load); a Ray head is `ray.address`",
    "ray": "`backend: ray` only",
    "ray.address": "`HOST:6379`, or `auto` (RAY_ADDRESS, else the local head)",
    "ray.namespace": "one controller drives one namespace at a time",
    "ray.shared_dirs": "paths mounted at the same place on every node",
    "slurm": "`backend: slurm` only: what each attempt's allocation (`sbatch`) asks for",
    "slurm.partition": "the partition of every allocation; null: the cluster's default",
    "slurm.account": "sbatch --account; null: the user's default",
    "slurm.qos": "sbatch --qos; null: the association's default",
    "slurm.time_limit": "one allocation's time limit (sbatch --time): MINUTES, HH:MM:SS, "
                        "D-HH[:MM[:SS]] (at most 365 days) or UNLIMITED",
    "slurm.sbatch_args": "extra sbatch options, appended as given; not those perdure sets "
                         "or reads back (--job-name, --nodelist, --output, --signal, ...)",
    "slurm.shared_dirs": "paths mounted at the same place on every node (as `ray.shared_dirs`)",
    "slurm.drain_bad_nodes": "drain a node perdure quarantines in Slurm too, with the reason",
    "kubernetes": "`backend: kubernetes` only: the cluster and what each agent pod is made with",
    "kubernetes.kubeconfig": "null: $KUBECONFIG, else ~/.kube/config, else the pod's service "
                             "account (in-cluster)",
    "kubernetes.context": "the kubeconfig's context; null: its current context",
    "kubernetes.namespace": "where the agent pods run; null: the context's, else default",
    "kubernetes.image": "the agent pods' image: Python, torch, perdure and the job's code",
    "kubernetes.service_account": "the agent pods' service account; null: none mounted",
    "kubernetes.node_selector": "labels a node must have (besides its hostname)",
    "kubernetes.tolerations": "the agent pods' tolerations (key, operator, value, effect, "
                              "tolerationSeconds)",
    "kubernetes.resources": "each agent pod's requests and limits; null: a CPU per replica "
                            "and its GPUs (nvidia.com/gpu)",
    "kubernetes.queue": "a Kueue LocalQueue (label kueue.x-k8s.io/queue-name): Kueue admits "
                        "the pods; perdure's queues then take no quota",
    "nodes": "virtual nodes, each a failure domain (with `ray`: omit to discover them)",
    "nodes[].name": "lowercase letters, digits and `-`",
    "nodes[].slots": "capacity, in pool `slots`",
    "queues": "queues and their quotas",
    "queues[].name": "a name specs give as `queue`",
    "queues[].quota": "at most this many slots in use by the queue's jobs (none: no limit)",
    "transport": "how replicas reach the controller: files in the state dir, or the network",
    "health": "when a node is quarantined, and the check it must pass first "
              "(docs/guides/node-health.md)",
    "health.max_node_failures": "machine failures within the window that quarantine a node "
                                "(0: never)",
    "health.window_seconds": "how long a failure counts against its node",
    "health.preflight": "argv run on a node before an attempt's replicas start there "
                        "(e.g. `[perdure, health-check]`); a failure quarantines it",
    "health.timeout_seconds": "a preflight that runs longer fails",
}


def _is_list(annotation: Any) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    return any(_is_list(a) for a in typing.get_args(annotation)
               if typing.get_origin(annotation) in (typing.Union, types.UnionType))


def type_name(annotation: Any) -> str:
    """The annotation as a user writes the value: `int`, `list[int]`, `"a" \\| "b"`, `map`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(a) for a in args)
    if origin is list:
        return f"list[{type_name(args[0])}]"
    if origin is dict:
        return f"map[{type_name(args[0])}, {type_name(args[1])}]"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " \\| ".join(json.dumps(m.value) for m in annotation)
    return getattr(annotation, "__name__", str(annotation))


_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥"),
           ("max_length", "length ≤"))


def bounds_text(info: FieldInfo) -> str:
    """The field's bounds as written in its Field (`≥ 1`), from pydantic's metadata."""
    out = []
    for item in info.metadata:
        for attr, sign in _BOUNDS:
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return ", ".join(out)


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "see below"
    if value is None or value is PydanticUndefined:
        return "none"
    return "`" + json.dumps(_plain(value)) + "`"


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return getattr(value, "value", value)


def rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(path, type, default, description) of every field of `model`, nested fields after
    their parent, `[]` marking a list's items."""
    out = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        desc = info.description or DESCRIPTIONS.get(path, UNDOCUMENTED)
        bounds = bounds_text(info)
        kind = type_name(info.annotation) + (f" ({bounds})" if bounds else "")
        out.append((path, kind, default_text(info), desc))
        inner = model_in(info.annotation)
        if inner is not None:
            out += rows(inner, f"{path}[]." if _is_list(info.annotation) else f"{path}.")
    return out


def table(model: type[BaseModel]) -> str:
    lines = ["| field | type | default | description |", "| --- | --- | --- | --- |"]
    lines += [f"| `{p}` | {t} | {d} | {x} |" for p, t, d, x in rows(model)]
    return "\n".join(lines)


def reference() -> str:
    """The job spec's and the cluster file's tables."""
    return "\n".join([
        "**Job spec** (`perdure validate`, `run`, `submit`, `POST /api/v1/jobs`):",
        "",
        table(JobSpec),
        "",
        "**Cluster file** (`--cluster`):",
        "",
        table(ClusterSpec),
    ])
