"""The backend protocol: a small surface the controller drives (launch / stop / poll / nodes),
and the inspector, what other processes (the CLI, serve) read and send: logs, signals, the
launch records. Neither imports a backend: `perdure.backends.factory` picks one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from perdure.core.events import ErrorInfo, Launch, Observation, Stop
from perdure.secrecy import redact


class LaunchError(RuntimeError):
    """The backend could not start a replica: an internal error, or with `user_error` one in
    the spec that no retry fixes (a missing working directory, a command not found)."""

    def __init__(self, message: str, *, user_error: bool = False) -> None:
        super().__init__(message)
        self.user_error = user_error


class BackendBusy(RuntimeError):
    """Another controller already drives what this backend would drive (a Ray namespace)."""


class BackendUnavailable(RuntimeError):
    """The backend cannot reach what it runs on (a Ray cluster that does not answer)."""


class BackendSettingError(ValueError):
    """An environment variable a backend reads is unusable; the message names it."""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    slots: int
    address: str | None = None  # where the node is reached (a Ray node's IP); None: here
    # GPUs: None (configured, not declared) is resolved by the backend; what nodes() returns
    # is a count. gpu_ids: what CUDA_VISIBLE_DEVICES calls them ("0".."gpus-1" when empty).
    gpus: int | None = 0
    gpu_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaunchRecord:
    """One launch of a replica as the backend recorded it (for goodput and reports)."""

    launch_id: str
    launched: float  # when the controller launched it (time.time())
    started: float | None  # when its process started; None: it never did
    exited: float | None  # when its process ended; None: still running (or unknown)
    progress: list[dict[str, Any]] = field(default_factory=list)  # the runtime's reports


Stream = Literal["out", "err", "log"]  # stdout, stderr, both merged in the order they came


class Inspector(Protocol):
    """What a process other than the controller reads from and sends to replicas.

    Cheap to make (starts nothing); works while the controller runs and while it is down.
    """

    def read_log(self, job_id: str, attempt: int, replica: str, stream: Stream,
                 offset: int) -> bytes | None:
        """The bytes of a replica's log of one attempt from `offset` on (b"" at its end);
        None when that log does not exist."""
        ...

    def signal(self, launch_id: str, sig: int) -> int:
        """Send `sig` to a launch's replica process (not its supervisor); its pid. Raises
        ProcessLookupError, with a message for the user, when it has not started or has ended."""
        ...

    def launch_records(self, job_id: str, replica: str) -> list[LaunchRecord]:
        """The launches of one replica of a job that started, oldest first."""
        ...

    def pool_summary(self) -> str | None:
        """One line on the backend's warm standby pool for `perdure node ls`; None if none."""
        ...


class Backend(Protocol):
    def nodes(self) -> list[NodeInfo]:
        """The nodes replicas may be placed on. A backend that sees nodes come and go (Ray)
        reports it through `poll` as fail-node / restore-node commands."""
        ...

    def launch(self, launch: Launch) -> None:
        """Start a replica without waiting for it; raise LaunchError when it cannot start."""
        ...

    def stop(self, stop: Stop) -> None:
        """Signal a replica now; it is killed when `stop.grace` runs out. Never blocks."""
        ...

    def poll(self) -> list[Observation]:
        """Observations since the last poll: replicas started, exited, lost."""
        ...

    def adopt(self, launch_ids: list[str]) -> list[Observation]:
        """After a controller restart: track these launches again.

        Launches still running are watched as if this backend had started them; those that
        ended while nobody watched are reported as ReplicaExited; those the backend never
        started are reported as LaunchFailed.
        """
        ...

    def kill_node(self, node: str) -> None:
        """Chaos: SIGKILL every replica on `node` at once (its exits come through poll)."""
        ...

    # Optional: `hold_nodes(HoldNodes)`, the spare nodes a job's attempt holds now, for a
    # backend that must allocate them (Slurm); the controller calls it only where defined.

    def close(self) -> None:
        """Stop watching (replicas keep running: a controller restart adopts them)."""
        ...


@runtime_checkable
class HoldsSpares(Protocol):
    """A backend that keeps the spare nodes jobs hold (`spares: K`) warm for their next
    replicas (Ray: each node's warm pool is its own, filled ahead of need)."""

    def hold_spares(self, nodes: frozenset[str]) -> None:
        """The spare nodes held now (after each tick that changed them). Never blocks."""
        ...


@runtime_checkable
class FencesNodes(Protocol):
    """A backend that enforces quarantines on its own scheduler's side (Slurm: `--exclude`
    from every later allocation, and with `slurm.drain_bad_nodes` a drain in Slurm)."""

    def fence_nodes(self, fenced: dict[str, str]) -> None:
        """The quarantined nodes now (node -> reason), after each tick that changed them and
        at the controller's start. Never blocks for long."""
        ...


def error_info(error: object) -> ErrorInfo | None:
    """A recorded error (an exit record's `error`, the error file's) as the core's ErrorInfo;
    None for anything that is not one."""
    if not isinstance(error, dict):
        return None
    return ErrorInfo(  # credentials in a URL a replica printed stop here (perdure.secrecy)
        type=str(error.get("type", "")),
        message=redact(str(error.get("message", ""))),
        traceback=redact(str(error.get("traceback", ""))),
        source=str(error.get("source", "error_file")),
    )
