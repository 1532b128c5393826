"""The job spec and the cluster file: pydantic models and their validation.

No side effects: parsing takes text, never reads files (the CLI reads them).
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from perdure import storageurl
from perdure.core import sbatchargs, yamlload
from perdure.core.healthspec import HealthSpec
from perdure.core.k8sspec import KubernetesSpec
from perdure.core.specbase import FLOAT_LIMIT as FLOAT_LIMIT
from perdure.core.specbase import INT_LIMIT as INT_LIMIT
from perdure.core.specbase import MAX_STRING as MAX_STRING
from perdure.core.specbase import REFERENCE, SpecModel, did_you_mean
from perdure.core.watchspec import IntervalFields, WatchdogSpec
from perdure.secrecy import has_userinfo, redact

NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?\Z")  # with .match: no trailing newline

MAX_POOLS = 64
MAX_REPLICAS = 16384  # per job, all pools together (bench/controller.py --only big)
MAX_NODES = 16384
MAX_GPUS = 1024  # per replica or node: more than any machine has
MAX_PROCS = 1024  # local ranks per replica


class SpecError(ValueError):
    """A spec or cluster file that cannot be used; the message names the field and the fix."""


HIDDEN_VALUE = "hidden_value"  # an error whose value is never shown (it may hold a password)


_Model = SpecModel  # every model below: unknown fields refused, every value bounded


def _check_env(env: dict[str, str]) -> dict[str, str]:
    for key in env:
        if not key or "=" in key:
            raise ValueError(
                f"environment variable name {key!r} is empty or holds '='; write NAME: value"
            )
    return env


def _storage_url(v: str) -> str:
    """A storage field's value if perdure can use it; the reason, never the value, if not."""
    why = storageurl.problem(v)
    if why:
        raise PydanticCustomError(HIDDEN_VALUE, "{why}", {"why": why})
    return v


def _no_credentials(v: str | None) -> str | None:
    """An address field's value, refused (never echoed) when it holds user:password@."""
    if v is not None and has_userinfo(v):
        raise PydanticCustomError(HIDDEN_VALUE, "{why}", {"why": storageurl.CREDENTIALS})
    return v


class RuleAction(str, Enum):
    RESTART = "restart"  # restart the replica in place
    RETRY = "retry"  # retry the job (new attempt)
    FAIL = "fail"  # fail the job at once
    IGNORE = "ignore"  # not a failure: the replica is done


class RuleSpec(_Model):
    """A user failure rule, matched before the defaults. Every given condition must hold."""

    exit_codes: list[int] | None = None
    signals: list[int] | None = None
    exception: str | None = None  # exception type name, e.g. "TimeoutError"
    message_contains: str | None = None
    action: RuleAction

    @model_validator(mode="after")
    def _has_condition(self) -> RuleSpec:
        if not (self.exit_codes or self.signals or self.exception or self.message_contains):
            raise ValueError(
                "a rule needs at least one of exit_codes, signals, exception, message_contains"
            )
        return self


class RestartSpec(_Model):
    max_replica_restarts: int = Field(5, ge=0)
    max_job_retries: int = Field(3, ge=0)
    transient_exit_codes: list[int] = Field(default_factory=lambda: [6, 134, 11, 139])
    rules: list[RuleSpec] = Field(default_factory=list)
    # group: a replica restart relaunches every replica with a new rendezvous (torchrun's
    # behaviour, right for plain DDP scripts); replica: only the failed one (scripts whose
    # survivors rebuild their process group themselves).
    scope: Literal["group", "replica"] = "group"
    stop_grace_seconds: float = Field(5.0, ge=0)
    # Survivors of a failed peer are stopped for the new round with this grace: they cannot
    # save a consistent checkpoint without the dead rank, and are often stuck in a collective.
    round_grace_seconds: float = Field(1.0, ge=0)


class SchedulingSpec(_Model):
    # How long a job that needs more than the healthy capacity waits before the attempt
    # fails as INSUFFICIENT_CAPACITY (then retried, at most 3 times).
    placement_timeout_seconds: float = Field(120.0, ge=0)


# The frameworks whose Trainer perdure's integration can be put into with no code change
# (perdure.integrations.autoinstall).
Integration = Literal["transformers", "lightning"]
LATEST = "{latest}"  # in a `resume:` argument: the newest path the glob matched


class ResumeSpec(_Model):
    """How a script resumes (`resume:` of a pool): on every launch after the job's first, if
    `when_exists` matches a path, `args` are appended to the command."""

    when_exists: str = Field(description=(
        "a glob, relative to the spec's directory or absolute: the script's own checkpoint "
        "(out/ckpt.pt, out/checkpoint-*)"))
    args: list[str] = Field(description=(
        "appended to the command when the glob matches; {latest} in one is the newest match "
        "(highest number in its name, then newest mtime)"))

    @field_validator("when_exists")
    @classmethod
    def _glob(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("is empty: write the path (or glob) of the script's checkpoint, "
                             "e.g. out/ckpt.pt")
        if "://" in v:
            raise ValueError("must be a local path or glob (relative to the spec's directory, "
                             "or absolute), not a URL")
        if v.count("[") != v.count("]"):
            raise ValueError("is not a valid glob: a '[' without its ']' (or the other way "
                             "round)")
        return v

    @field_validator("args", mode="before")
    @classmethod
    def _args(cls, v: Any) -> Any:
        if isinstance(v, str):
            raise ValueError(f"args is a list of arguments, not a string: write {v.split()!r}")
        if isinstance(v, list):
            if not v:
                raise ValueError("is empty: list the arguments that make the script resume, "
                                 "e.g. [--init_from=resume]")
            v = [str(x) if isinstance(x, int | float) else x for x in v]
            for arg in v:
                unknown = [m for m in _PLACEHOLDER.findall(str(arg)) if m != LATEST]
                if unknown:
                    raise ValueError(f"{arg!r}: unknown placeholder {unknown[0]}; the only one "
                                     f"is {LATEST} (the newest path the glob matched)")
        return v


_PLACEHOLDER = re.compile(r"\{[A-Za-z_]+\}")


class PoolSpec(_Model):
    name: str
    replicas: int = Field(1, ge=1, le=MAX_REPLICAS)
    min_replicas: int | None = Field(None, ge=1)
    command: list[str] = Field(min_length=1)
    slots: int = Field(1, ge=1)
    gpus: int = Field(0, ge=0, le=MAX_GPUS, description=(
        "GPUs per replica, all on the replica's node; the replica's processes see exactly "
        "these in CUDA_VISIBLE_DEVICES (0: none, and a GPU node's devices are hidden)"))
    procs_per_replica: int = Field(1, ge=1, le=MAX_PROCS, description=(
        "processes (local ranks) per replica, as torchrun's --nproc-per-node: each gets "
        "LOCAL_RANK 0..N-1 and RANK = first rank of its replica + LOCAL_RANK; one that fails "
        "fails its replica"))
    memory_mb: int | None = Field(None, ge=16)
    env: dict[str, str] = Field(default_factory=dict)
    # Whole free nodes the attempt holds, warm, for replicas of a lost node: they are replaced
    # at once instead of waiting for capacity or shrinking (and another spare is sought).
    spares: int = Field(0, ge=0, le=MAX_NODES)
    # Seconds this pool's replicas get to finish on their own once the primary succeeded
    # (DDP ranks end a moment after rank 0); then they are killed.
    grace: float = Field(10.0, ge=0)
    resume: ResumeSpec | None = Field(None, description=(
        "how the script resumes: {when_exists: GLOB, args: [...]}, appended on a relaunch "
        "when GLOB matches"))
    integrations: list[Integration] = Field(default_factory=list, max_length=2, description=(
        "frameworks whose Trainer gets perdure's integration with no code change: "
        "transformers, lightning"))

    _env = field_validator("env")(_check_env)

    @field_validator("integrations")
    @classmethod
    def _integrations(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"names a framework twice: {v}")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v) or len(v) > 32:
            raise ValueError("use lowercase letters, digits and '-', at most 32 characters")
        return v

    @field_validator("command", mode="before")
    @classmethod
    def _argv(cls, v: Any) -> Any:
        if isinstance(v, str):
            raise ValueError(
                "command is an argv list, not a shell string: write "
                f"{v.split()!r} instead of {v!r}"
            )
        if isinstance(v, list):
            return [str(x) if isinstance(x, int | float) else x for x in v]
        return v

    @model_validator(mode="after")
    def _min(self) -> PoolSpec:
        if self.min_replicas is not None and self.min_replicas > self.replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) is larger than replicas ({self.replicas})"
            )
        if self.gpus and self.gpus % self.procs_per_replica:
            raise ValueError(
                f"gpus ({self.gpus}) is not a multiple of procs_per_replica "
                f"({self.procs_per_replica}): each local rank gets gpus / procs_per_replica "
                "GPUs of its own; use a multiple, or 0 GPUs"
            )
        if self.procs_per_replica > 1 and self.min_replicas is not None:
            raise ValueError(
                "min_replicas (elastic) and procs_per_replica > 1 cannot be combined yet: an "
                "elastic round changes whole replicas; use procs_per_replica: 1 (one replica "
                "per rank) for an elastic pool"
            )
        return self

    @property
    def procs(self) -> int:
        """Processes (ranks) of the whole pool."""
        return self.replicas * self.procs_per_replica


class ElasticSpec(_Model):
    mode: Literal["resize", "pause"] = "resize"


class CheckpointSpec(IntervalFields):
    dir: str | None = None
    every_steps: int | None = Field(None, ge=1)

    @field_validator("dir")
    @classmethod
    def _dir(cls, v: str | None) -> str | None:
        return None if v is None else _storage_url(v)


class PreemptionSpec(_Model):
    grace_seconds: float = Field(30.0, ge=0)


class JobSpec(_Model):
    """A training job: pools of replicas, the failure policy and the runtime's settings."""

    name: str
    queue: str = "default"
    priority: int = 0
    pools: list[PoolSpec] = Field(min_length=1, max_length=MAX_POOLS)
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    restart: RestartSpec = Field(default_factory=RestartSpec)  # type: ignore[arg-type]
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)  # type: ignore[arg-type]
    elastic: ElasticSpec = Field(default_factory=ElasticSpec)  # type: ignore[arg-type]
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)  # type: ignore[arg-type]
    preemption: PreemptionSpec = Field(default_factory=PreemptionSpec)  # type: ignore[arg-type]
    watchdog: WatchdogSpec = Field(default_factory=WatchdogSpec)  # type: ignore[arg-type]

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v) or len(v) > 48:
            raise ValueError("use lowercase letters, digits and '-', at most 48 characters")
        return v

    @model_validator(mode="after")
    def _unique_pools(self) -> JobSpec:
        names = [p.name for p in self.pools]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"pool names must be unique; repeated: {sorted(dup)}")
        if self.total_replicas > MAX_REPLICAS:
            raise ValueError(f"{self.total_replicas} replicas in all pools is more than the "
                             f"{MAX_REPLICAS} a job may have")
        if self.total_procs > MAX_REPLICAS * 8:
            raise ValueError(f"{self.total_procs} processes in all pools (replicas x "
                             f"procs_per_replica) is more than the {MAX_REPLICAS * 8} a job "
                             "may have")
        return self

    _env = field_validator("env")(_check_env)

    @property
    def total_replicas(self) -> int:
        return sum(p.replicas for p in self.pools)

    @property
    def total_slots(self) -> int:
        return sum(p.replicas * p.slots for p in self.pools)

    @property
    def total_spares(self) -> int:
        return sum(p.spares for p in self.pools)

    @property
    def total_gpus(self) -> int:
        return sum(p.replicas * p.gpus for p in self.pools)

    @property
    def total_procs(self) -> int:
        """Ranks of the job (WORLD_SIZE): every replica's processes."""
        return sum(p.procs for p in self.pools)


class NodeSpec(_Model):
    name: str
    slots: int = Field(ge=1)
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


class QueueSpec(_Model):
    name: str
    quota: int | None = Field(None, ge=1)


class RaySpec(_Model):
    """`ray:` of a cluster file: which Ray cluster, and what every node of it mounts."""

    address: str = "auto"  # "HEAD_HOST:6379", or "auto" (RAY_ADDRESS, else the local head)
    namespace: str = "perdure"  # one controller drives one namespace at a time
    # Paths mounted at the same place on every node (a shared filesystem, declared as such):
    # a checkpoint dir under one of them is reachable by every replica.
    shared_dirs: list[str] = Field(default_factory=list)

    _address = field_validator("address")(_no_credentials)


class SlurmSpec(_Model):
    """`slurm:` of a cluster file: what each attempt's allocation (`sbatch`) asks Slurm for,
    and what every node mounts."""

    partition: str | None = "main"  # None: the cluster's default partition
    account: str | None = None
    qos: str | None = None
    time_limit: str = "24:00:00"  # of one allocation (sbatch --time)
    sbatch_args: list[str] = Field(default_factory=list)  # appended to every sbatch, as given
    shared_dirs: list[str] = Field(default_factory=list)  # as `ray: shared_dirs`
    # A node perdure quarantines is drained in Slurm too, with the reason (scontrol)
    drain_bad_nodes: bool = False

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


class ClusterSpec(_Model):
    """Where replicas may run (virtual nodes, each a failure domain) and the queues' quotas."""

    backend: Literal["local", "ray", "slurm", "kubernetes", "fake"] = "local"
    address: str | None = None
    ray: RaySpec | None = None  # backend ray only; nodes may then be omitted (discovered)
    slurm: SlurmSpec | None = None  # backend slurm only; nodes may be omitted (from sinfo)
    kubernetes: KubernetesSpec | None = None  # backend kubernetes only (core/k8sspec.py)
    nodes: list[NodeSpec] = Field(default_factory=list, max_length=MAX_NODES)
    queues: list[QueueSpec] = Field(default_factory=lambda: [QueueSpec(name="default", quota=None)])
    # How replicas reach the controller: files in the state dir (one host), or the network
    # through the controller's relay (hosts without the state dir; always so on ray).
    transport: Literal["file", "net"] = "file"
    # When a node is quarantined and what it must pass first (core/healthspec.py)
    health: HealthSpec = Field(default_factory=HealthSpec)  # type: ignore[arg-type]

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


MAX_ERRORS = 20  # lines of errors shown; a hostile file may have thousands


def _short(value: Any, limit: int = 80) -> str:
    """A value as it appears in an error, cut short, credentials hidden: errors never echo a
    whole document, nor a password."""
    text = redact(repr(value))
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


_PLAIN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _loc_part(part: object) -> str:
    """A field name or index as written; an odd key (empty, a newline, huge) quoted, cut."""
    text = str(part)
    return text if _PLAIN.match(text) else _short(text, 40)


def _format_errors(err: ValidationError, source: str, model: type[SpecModel]) -> str:
    lines = [f"{source}: invalid spec"]
    errors = err.errors()
    for e in errors[:MAX_ERRORS]:
        loc = ".".join(_loc_part(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = did_you_mean(model, e["loc"])
        value = e.get("input")
        hidden = ("missing", "extra_forbidden", HIDDEN_VALUE)
        shown = "" if e["type"] in hidden else f" (got {_short(value)})"
        lines.append(f"  {loc}: {msg}{shown}")
    if len(errors) > MAX_ERRORS:
        lines.append(f"  ... and {len(errors) - MAX_ERRORS} more errors")
    if any(e["type"] == "extra_forbidden" for e in errors):
        lines.append(f"  ({REFERENCE})")
    return "\n".join(lines)


def _load_yaml(text: str | bytes, source: str) -> Any:
    try:
        if isinstance(text, bytes):
            text = yamlload.decode(text)
        data = yamlload.load(text)
    except yamlload.YamlError as exc:
        raise SpecError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping of fields at the top level")
    return data


def parse_job_spec(text: str | bytes, source: str = "spec") -> JobSpec:
    """Parse and validate a job spec from YAML text; raise SpecError naming each bad field."""
    data = _load_yaml(text, source)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_errors(exc, source, JobSpec)) from None


def parse_cluster(text: str | bytes, source: str = "cluster") -> ClusterSpec:
    """Parse and validate a cluster file from YAML text; raise SpecError naming each bad field."""
    data = _load_yaml(text, source)
    try:
        cluster = ClusterSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_errors(exc, source, ClusterSpec)) from None
    if cluster.backend == "local" and not cluster.nodes:
        raise SpecError(f"{source}: nodes: the local backend needs at least one node")
    if cluster.ray is not None and cluster.backend != "ray":
        raise SpecError(f"{source}: ray: only for `backend: ray` (this cluster's backend is "
                        f"{cluster.backend!r}); remove the ray section or set backend: ray")
    if cluster.slurm is not None and cluster.backend != "slurm":
        raise SpecError(f"{source}: slurm: only for `backend: slurm` (this cluster's backend "
                        f"is {cluster.backend!r}); remove the slurm section or set "
                        "backend: slurm")
    _check_kubernetes(cluster, source)
    return cluster


def _check_kubernetes(cluster: ClusterSpec, source: str) -> None:
    if cluster.kubernetes is not None and cluster.backend != "kubernetes":
        raise SpecError(f"{source}: kubernetes: only for `backend: kubernetes` (this cluster's "
                        f"backend is {cluster.backend!r}); remove the kubernetes section or "
                        "set backend: kubernetes")
    if cluster.backend == "kubernetes" and cluster.kubernetes is None:
        raise SpecError(f"{source}: kubernetes: `backend: kubernetes` needs a kubernetes "
                        "section with at least `image:` (the agent pods' image)")
    k8s = cluster.kubernetes
    if k8s is not None and k8s.queue and any(q.quota is not None for q in cluster.queues):
        raise SpecError(f"{source}: queues: kubernetes.queue {k8s.queue!r} lets Kueue hold the "
                        "quota; a perdure quota as well would queue jobs twice: remove `quota` "
                        "from queues or kubernetes.queue")


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


_M = TypeVar("_M", bound=SpecModel)


def parse_model(model: type[_M], text: str | bytes, source: str) -> _M:
    """Parse YAML text into `model` with the spec's bounded reader and error messages."""
    data = _load_yaml(text, source)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_errors(exc, source, model)) from None
