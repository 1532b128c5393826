"""The job spec: pydantic models and their validation. No side effects: parsing takes text,
never reads files.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from perdure import storageurl
from perdure.core.specbase import MAX_GPUS, MAX_NODES, NAME_RE, SpecModel
from perdure.core.specread import HIDDEN_VALUE, parse_model
from perdure.core.watchspec import IntervalFields, WatchdogSpec

MAX_POOLS = 64
MAX_REPLICAS = 16384  # per job, all pools together (bench/controller.py --only big)
MAX_PROCS = 1024  # local ranks per replica

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


class RuleAction(str, Enum):
    RESTART = "restart"  # restart the replica in place
    RETRY = "retry"  # retry the job (new attempt)
    FAIL = "fail"  # fail the job at once
    IGNORE = "ignore"  # not a failure: the replica is done


class RuleSpec(SpecModel):
    """A user failure rule, matched before the defaults. Every given condition must hold."""

    exit_codes: list[int] | None = Field(None, description="match these exit codes")
    signals: list[int] | None = Field(None, description="match these signals (numbers)")
    exception: str | None = Field(
        None, description="match an uncaught exception of this type name")
    message_contains: str | None = Field(
        None, description="match an exception message containing this text")
    action: RuleAction = Field(description="what to do on a match")

    @model_validator(mode="after")
    def _has_condition(self) -> RuleSpec:
        if not (self.exit_codes or self.signals or self.exception or self.message_contains):
            raise ValueError(
                "a rule needs at least one of exit_codes, signals, exception, message_contains"
            )
        return self


class RestartSpec(SpecModel):
    max_replica_restarts: int = Field(5, ge=0, description=(
        "restarts in place per replica before the job is retried"))
    max_job_retries: int = Field(3, ge=0, description=(
        "new attempts of the whole job before it fails"))
    transient_exit_codes: list[int] = Field(
        default_factory=lambda: [6, 134, 11, 139],
        description="exit codes and signals that retry the job at once")

    rules: list[RuleSpec] = Field(default_factory=list, description=(
        "rules matched before the defaults; every condition given must hold"))
    # group suits plain DDP scripts; replica, scripts whose survivors rebuild their own group
    scope: Literal["group", "replica"] = Field("group", description=(
        "`group`: a restart relaunches every replica (torchrun's way); `replica`: only the "
        "failed one"))
    stop_grace_seconds: float = Field(5.0, ge=0, description=(
        "SIGTERM to SIGKILL when replicas are stopped"))
    # Short: without the dead rank, survivors cannot save and are often stuck in a collective.
    round_grace_seconds: float = Field(1.0, ge=0, description=(
        "the same for the survivors of a failed peer"))


class SchedulingSpec(SpecModel):
    placement_timeout_seconds: float = Field(120.0, ge=0, description=(
        "how long a job waits for capacity before the attempt fails as INSUFFICIENT_CAPACITY"))


# The frameworks whose Trainer perdure's integration can be put into with no code change
# (perdure.integrations.autoinstall).
Integration = Literal["transformers", "lightning"]
LATEST = "{latest}"  # in a `resume:` argument: the newest path the glob matched


class ResumeSpec(SpecModel):
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


class PoolSpec(SpecModel):
    name: str = Field(description=(
        "the pool's name (replicas are `<pool>-<index>`), at most 32 characters"))
    replicas: int = Field(1, ge=1, le=MAX_REPLICAS, description=(
        "how many replicas (processes; ranks in the job's order of pools)"))
    min_replicas: int | None = Field(None, ge=1, description=(
        "makes the pool elastic: the job goes on while this many are up"))
    command: list[str] = Field(min_length=1, description=(
        "argv, not a shell string; a leading `python` is perdure's interpreter"))
    slots: int = Field(1, ge=1, description=(
        "the capacity one replica takes on its node (cluster file `slots`)"))
    gpus: int = Field(0, ge=0, le=MAX_GPUS, description=(
        "GPUs per replica, all on the replica's node; the replica's processes see exactly "
        "these in CUDA_VISIBLE_DEVICES (0: none, and a GPU node's devices are hidden)"))
    procs_per_replica: int = Field(1, ge=1, le=MAX_PROCS, description=(
        "processes (local ranks) per replica, as torchrun's --nproc-per-node: each gets "
        "LOCAL_RANK 0..N-1 and RANK = first rank of its replica + LOCAL_RANK; one that fails "
        "fails its replica"))
    memory_mb: int | None = Field(None, ge=16, description=(
        "a replica over this is killed: OUT_OF_MEMORY"))
    env: dict[str, str] = Field(default_factory=dict, description=(
        "environment variables of this pool's replicas (over the job's `env`)"))
    spares: int = Field(0, ge=0, le=MAX_NODES, description=(
        "whole free nodes the attempt holds warm: a lost node's replicas are placed on one at "
        "once, and another is sought"))
    # DDP ranks end a moment after rank 0
    grace: float = Field(10.0, ge=0, description=(
        "seconds the pool's replicas get to end by themselves once the primary succeeded "
        "(shown `finished`); then they are stopped"))
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


class ElasticSpec(SpecModel):
    mode: Literal["resize", "pause"] = Field("resize", description=(
        "`resize`: go on with the survivors; `pause`: wait for all"))


class CheckpointSpec(IntervalFields):
    dir: str | None = Field(None, description=(
        "a path (relative to the spec) or URL (`s3://BUCKET/...`, `gs://`, `file://`, "
        "`memory://`), never with credentials in it; default: the state dir's "
        "`checkpoints/<job>`"))
    every_steps: int | None = Field(None, ge=1, description=(
        "save every N steps (`Checkpointer.maybe_save`)"))

    @field_validator("dir")
    @classmethod
    def _dir(cls, v: str | None) -> str | None:
        return None if v is None else _storage_url(v)


class PreemptionSpec(SpecModel):
    grace_seconds: float = Field(30.0, ge=0, description=(
        "time a replica has to save and exit after a notice"))


class JobSpec(SpecModel):
    """A training job: pools of replicas, the failure policy and the runtime's settings."""

    name: str = Field(description=(
        "the job's name: lowercase letters, digits and `-`, at most 48 characters"))
    queue: str = Field("default", description=(
        "the queue (cluster file `queues`) whose quota the job counts against"))
    priority: int = Field(0, description=(
        "higher runs first; a job that lost capacity may preempt a lower one"))
    pools: list[PoolSpec] = Field(min_length=1, max_length=MAX_POOLS, description=(
        "groups of identical replicas (at most 64 pools, 16,384 replicas in all); the first "
        "pool's replica 0 is the primary: its exit 0 ends the job as SUCCEEDED"))
    env: dict[str, str] = Field(default_factory=dict, description=(
        "environment variables of every replica; torchrun's and perdure's own names win"))
    workdir: str | None = Field(None, description=(
        "the replicas' working directory, relative to the spec's directory"))
    restart: RestartSpec = Field(default_factory=RestartSpec,  # type: ignore[arg-type]
                                 description="the failure policy's budgets and rules")
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec,  # type: ignore[arg-type]
                                       description="placement")
    elastic: ElasticSpec = Field(default_factory=ElasticSpec,  # type: ignore[arg-type]
                                 description="what an elastic pool does when it loses replicas")
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec,  # type: ignore[arg-type]
                                       description=("where and how often the runtime's "
                                                    "`Checkpointer` saves"))
    preemption: PreemptionSpec = Field(default_factory=PreemptionSpec,  # type: ignore[arg-type]
                                       description="preemption notices")
    watchdog: WatchdogSpec = Field(default_factory=WatchdogSpec,  # type: ignore[arg-type]
                                   description="hung jobs and stragglers")

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


def parse_job_spec(text: str | bytes, source: str = "spec") -> JobSpec:
    """Parse and validate a job spec from YAML text; raise SpecError naming each bad field."""
    return parse_model(JobSpec, text, source)
