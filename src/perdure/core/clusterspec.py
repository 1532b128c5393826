"""The cluster file: nodes, queues and each backend's settings; the check of a job against the
cluster's queues. No side effects: parsing takes text, never reads files.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from perdure import storageurl
from perdure.core import sbatchargs
from perdure.core.healthspec import HealthSpec
from perdure.core.k8sspec import KubernetesSpec
from perdure.core.spec import JobSpec
from perdure.core.specbase import MAX_GPUS, MAX_NODES, NAME_RE, SpecModel
from perdure.core.specread import HIDDEN_VALUE, SpecError, parse_model
from perdure.secrecy import has_userinfo


def _no_credentials(v: str | None) -> str | None:
    """An address field's value, refused (never echoed) when it holds user:password@."""
    if v is not None and has_userinfo(v):
        raise PydanticCustomError(HIDDEN_VALUE, "{why}", {"why": storageurl.CREDENTIALS})
    return v


class NodeSpec(SpecModel):
    name: str = Field(description="lowercase letters, digits and `-`")
    slots: int = Field(ge=1, description="capacity, in pool `slots`")
    gpus: int | None = Field(None, ge=0, le=MAX_GPUS, description=(
        "GPUs of the node, given to replicas as slots are; omitted: the local backend "
        "counts them (CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L`, else 0), Ray "
        "reads its node's GPU resource"))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("use lowercase letters, digits and '-'")
        return v


class QueueSpec(SpecModel):
    name: str = Field(description="a name specs give as `queue`")
    quota: int | None = Field(None, ge=1, description=(
        "at most this many slots in use by the queue's jobs (none: no limit)"))


class RaySpec(SpecModel):
    """`ray:` of a cluster file: which Ray cluster, and what every node of it mounts."""

    address: str = Field(default="auto", description=(
        "`HOST:6379`, or `auto` (RAY_ADDRESS, else the local head)"))
    namespace: str = Field(default="perdure", description=(
        "one controller drives one namespace at a time"))
    # a checkpoint dir under one of them is reachable by every replica
    shared_dirs: list[str] = Field(default_factory=list, description=(
        "paths mounted at the same place on every node"))

    _address = field_validator("address")(_no_credentials)


class SlurmSpec(SpecModel):
    """`slurm:` of a cluster file: what each attempt's allocation (`sbatch`) asks Slurm for,
    and what every node mounts."""

    partition: str | None = Field(default="main", description=(
        "the partition of every allocation; null: the cluster's default"))
    account: str | None = Field(default=None, description=(
        "sbatch --account; null: the user's default"))
    qos: str | None = Field(default=None, description=(
        "sbatch --qos; null: the association's default"))
    time_limit: str = Field(default="24:00:00", description=(
        "one allocation's time limit (sbatch --time): MINUTES, HH:MM:SS, D-HH[:MM[:SS]] (at "
        "most 365 days) or UNLIMITED"))
    sbatch_args: list[str] = Field(default_factory=list, description=(
        "extra sbatch options, appended as given; not those perdure sets or reads back "
        "(--job-name, --nodelist, --output, --signal, ...)"))
    shared_dirs: list[str] = Field(default_factory=list, description=(
        "paths mounted at the same place on every node (as `ray.shared_dirs`)"))
    drain_bad_nodes: bool = Field(default=False, description=(
        "drain a node perdure quarantines in Slurm too, with the reason"))

    @field_validator("time_limit")
    @classmethod
    def _time_limit(cls, v: str) -> str:
        if not SLURM_TIME_RE.match(v):
            raise ValueError("use Slurm's time format: MINUTES, HH:MM:SS, D-HH[:MM[:SS]] or "
                             "UNLIMITED")
        if slurm_seconds(v) > MAX_SLURM_DAYS * 86400:
            raise ValueError(f"more than {MAX_SLURM_DAYS} days; use UNLIMITED for no limit")
        return v

    @field_validator("sbatch_args")
    @classmethod
    def _sbatch_args(cls, v: list[str]) -> list[str]:
        refused = sbatchargs.refusals(v)
        if refused:  # one line each, at the argument's index
            raise ValidationError.from_exception_data("sbatch_args", [
                InitErrorDetails(type=PydanticCustomError("sbatch_arg", "{why}", {"why": why}),
                                 loc=(i,), input=v[i]) for i, why in refused])
        return v


# sbatch --time: "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S", or UNLIMITED; each number
# bounded (and the whole by MAX_SLURM_DAYS), no trailing newline (\Z, not $)
SLURM_TIME_RE = re.compile(
    r"(\d{1,9}(:\d{1,9}){0,2}|\d{1,9}-\d{1,9}(:\d{1,9}){0,2}|UNLIMITED|INFINITE)\Z")
MAX_SLURM_DAYS = 365


def slurm_seconds(limit: str) -> int:
    """Seconds of a time limit SLURM_TIME_RE accepts (UNLIMITED: 0). No side effects."""
    if limit in ("UNLIMITED", "INFINITE"):
        return 0
    days, _, clock = limit.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-H[:M[:S]]
        h, m, sec = [*parts, 0, 0][:3]
    elif len(parts) == 3:  # H:M:S
        h, m, sec = parts
    else:  # M or M:S
        h, (m, sec) = 0, [*parts, 0][:2]
    return ((int(days or 0) * 24 + h) * 60 + m) * 60 + sec


class ClusterSpec(SpecModel):
    """Where replicas may run (virtual nodes, each a failure domain) and the queues' quotas."""

    backend: Literal["local", "ray", "slurm", "kubernetes", "fake"] = Field(
        default="local", description="where replicas run")
    address: str | None = Field(default=None, description=(
        "not used (older cluster files still load); a Ray head is `ray.address`"))
    ray: RaySpec | None = Field(default=None, description="`backend: ray` only")
    slurm: SlurmSpec | None = Field(default=None, description=(
        "`backend: slurm` only: what each attempt's allocation (`sbatch`) asks for"))
    kubernetes: KubernetesSpec | None = Field(default=None, description=(
        "`backend: kubernetes` only: the cluster and what each agent pod is made with"))
    nodes: list[NodeSpec] = Field(default_factory=list, max_length=MAX_NODES, description=(
        "virtual nodes, each a failure domain (with `ray`: omit to discover them)"))
    queues: list[QueueSpec] = Field(
        default_factory=lambda: [QueueSpec(name="default", quota=None)],
        description="queues and their quotas")
    # the net relay serves hosts without the state dir (always so on ray)
    transport: Literal["file", "net"] = Field(default="file", description=(
        "how replicas reach the controller: files in the state dir, or the network"))
    health: HealthSpec = Field(default_factory=HealthSpec,  # type: ignore[arg-type]
                               description=("when a node is quarantined, and the check it "
                                            "must pass first (docs/guides/node-health.md)"))

    _address = field_validator("address")(_no_credentials)

    @model_validator(mode="after")
    def _unique(self) -> ClusterSpec:
        for what, names in (
            ("node", [n.name for n in self.nodes]),
            ("queue", [q.name for q in self.queues]),
        ):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"{what} names must be unique; repeated: {dup}")
        return self


def default_cluster(cores: int) -> ClusterSpec:
    """One node `local` with as many slots as cores, one queue `default` without a quota."""
    return ClusterSpec(nodes=[NodeSpec(name="local", slots=max(1, cores), gpus=None)])


def parse_cluster(text: str | bytes, source: str = "cluster") -> ClusterSpec:
    """Parse and validate a cluster file from YAML text; raise SpecError naming each bad field."""
    cluster = parse_model(ClusterSpec, text, source)
    if cluster.backend == "local" and not cluster.nodes:
        raise SpecError(f"{source}: nodes: the local backend needs at least one node")
    for section in ("ray", "slurm", "kubernetes"):
        if getattr(cluster, section) is not None and cluster.backend != section:
            raise SpecError(f"{source}: {section}: only for `backend: {section}` (this "
                            f"cluster's backend is {cluster.backend!r}); remove the {section} "
                            f"section or set backend: {section}")
    if cluster.backend == "kubernetes" and cluster.kubernetes is None:
        raise SpecError(f"{source}: kubernetes: `backend: kubernetes` needs a kubernetes "
                        "section with at least `image:` (the agent pods' image)")
    k8s = cluster.kubernetes
    if k8s is not None and k8s.queue and any(q.quota is not None for q in cluster.queues):
        raise SpecError(f"{source}: queues: kubernetes.queue {k8s.queue!r} lets Kueue hold the "
                        "quota; a perdure quota as well would queue jobs twice: remove `quota` "
                        "from queues or kubernetes.queue")
    return cluster


def check_job_fits(spec: JobSpec, cluster: ClusterSpec) -> None:
    """Reject a job whose queue is unknown (a job larger than the cluster is the scheduler's)."""
    queues = [q.name for q in cluster.queues]
    if spec.queue not in queues:
        raise SpecError(f"queue: unknown queue {spec.queue!r}; the cluster has {queues}")
    quota = next(q.quota for q in cluster.queues if q.name == spec.queue)
    if quota is not None and spec.total_slots > quota:
        raise SpecError(
            f"pools: the job needs {spec.total_slots} slots but queue {spec.queue!r} has a "
            f"quota of {quota}: it could never start; use fewer replicas or slots, or raise "
            "the quota in the cluster file"
        )
