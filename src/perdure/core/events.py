"""What the shell tells the core (observations) and what the core tells the shell (decisions).

No side effects: plain frozen records.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ErrorInfo:
    """An uncaught exception reported by a replica (error file or stderr traceback)."""

    type: str  # e.g. "ValueError"
    message: str  # e.g. "bad shape"
    traceback: str = ""
    source: str = "error_file"  # error_file | stderr

    def summary(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


# ---- observations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaStarted:
    """The backend has started the replica's process."""

    launch_id: str
    pid: int
    time: float


@dataclass(frozen=True)
class ReplicaExited:
    """A replica's process ended. `exit_code` follows the shell convention (128 + signal)."""

    launch_id: str
    exit_code: int
    time: float
    signal: int | None = None
    oom: bool = False
    error: ErrorInfo | None = None
    peak_rss_mb: float | None = None
    local_rank: int | None = None  # the process that failed first, of a multi-process replica
    stderr_tail: str = ""  # for a failure with no exception to name


@dataclass(frozen=True)
class LaunchFailed:
    """The backend could not start (or lost track of) a launch: an internal error, or with
    `user_error` the spec's (the job fails at once, naming the problem)."""

    launch_id: str
    message: str
    time: float
    user_error: bool = False


# how the state event of a job whose launches wait in the backend's own queue begins
QUEUED_IN_BACKEND = "QUEUED: waiting in the backend's queue:"


@dataclass(frozen=True)
class LaunchQueued:
    """The launch waits in the backend's own queue (a Slurm allocation pending) for `reason`,
    in that scheduler's words; an empty `reason`: it left that queue."""

    launch_id: str
    reason: str
    time: float
    where: str = "the backend"
    detail: str = ""


@dataclass(frozen=True)
class ReplicaProgress:
    """A replica's training progress, as the runtime reported it."""

    launch_id: str
    step: int | None  # None: no step reported yet
    time: float
    steps: int = 0  # steps finished since the last report
    step_seconds: float | None = None  # their mean
    save_seconds: float | None = None  # the longest blocking part of a save among them
    notes: tuple[str, ...] = ()  # messages to show as the job's events
    # saves failed in a row (None: no outcome reported; 0: one committed)
    failed_saves: int | None = None
    save_error: str | None = None
    alert_after: int | None = None
    restores: tuple[str, ...] = ()  # where each restore since the last report came from


@dataclass(frozen=True)
class Hung:
    """The watchdog found a job stalled and captured its stacks; `launch_id` is the laggard's."""

    launch_id: str
    time: float
    message: str
    report: str


@dataclass(frozen=True)
class Command:
    """A user's command, delivered through the store: cancel, preempt, resume, node actions.

    kind: cancel | preempt | resume | fail-node | drain-node | preempt-node | restore-node
    (the user's: lifts a quarantine too) | node-back (a backend sees a lost node again)
    """

    kind: str
    target: str  # job id or node name
    time: float
    hold: bool = False  # preempt: stay SUSPENDED until resumed
    why: str = ""  # a backend's drain-node: the platform's reason (Slurm's, Ray's)


@dataclass(frozen=True)
class NodeCheckFailed:
    """A node failed its preflight check (the cluster file's `health: preflight`)."""

    node: str
    message: str
    time: float


Observation = (ReplicaStarted | ReplicaExited | LaunchFailed | LaunchQueued | ReplicaProgress
               | Hung | Command | NodeCheckFailed)


# ---- decisions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResumeArgs:
    """A pool's `resume:` for one launch: append `args` when `glob` (absolute) matches; the
    shell looks the glob up once per `key`, so every rank of a group gets the same command."""

    glob: str
    args: tuple[str, ...]
    key: str


@dataclass(frozen=True)
class Launch:
    """Start one replica process on a node."""

    launch_id: str
    job_id: str
    replica: str
    node: str
    command: tuple[str, ...]
    env: dict[str, str] = field(hash=False)
    cwd: str
    memory_mb: int | None
    # <state>/logs/<job>/attempt-<n>/<replica>; the backend appends .out / .err / .log (both)
    log_prefix: str
    gpus: int = 0  # GPUs the replica holds (env CUDA_VISIBLE_DEVICES names them, where known)
    resume: ResumeArgs | None = None
    master_key: str = ""  # launches of one key share a MASTER_PORT (backends/masterport.py)


@dataclass(frozen=True)
class Stop:
    """Stop one replica: `signal` to its process group after `delay`, SIGKILL `grace` later.

    With a `notice` ("preemption", "maintenance") the runtime saves before it exits; without,
    it exits at once (survivors of a failed peer have nothing to save).
    """

    launch_id: str
    signal: int
    grace: float
    reason: str
    notice: str | None = None
    delay: float = 0.0  # the replica may end by itself first (after the primary succeeded)


@dataclass(frozen=True)
class KillNode:
    """Chaos: the node failed; every process on it dies at once."""

    node: str


@dataclass(frozen=True)
class Rendezvous:
    """An elastic job's membership for a round; its replicas rebuild their group from it."""

    job_id: str
    attempt: int
    round: int
    members: tuple[tuple[str, str], ...]  # (replica, node) in rank order
    reason: str
    time: float


@dataclass(frozen=True)
class HoldNodes:
    """Every spare node (`spares: K`) an attempt holds now (empty: the attempt ended); a
    backend with a scheduler of its own (Slurm) keeps them in the attempt's allocation."""

    job_id: str
    attempt: int
    nodes: tuple[str, ...]


Decision = Launch | Stop | KillNode | Rendezvous | HoldNodes
