"""The backend the controller drives (launch / stop / poll / nodes, and capabilities with
defaults), and the inspector other processes (the CLI, serve) read and signal through.
"""

from __future__ import annotations

import abc
import os
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from perdure import statedir
from perdure.core.events import (
    ErrorInfo,
    HoldNodes,
    Launch,
    LaunchFailed,
    Observation,
    ReplicaExited,
    Stop,
)
from perdure.secrecy import redact

if TYPE_CHECKING:  # imported where used: the node side imports this module on every start
    from perdure.backends.stacks import StackDump


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
    """What a process other than the controller reads from and sends to replicas; starts
    nothing, and works whether the controller runs or not."""

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


class Backend(abc.ABC):
    """Where replicas run, as the controller drives it. The capabilities after the abstract
    methods default to doing nothing; a backend overrides those its platform has."""

    @abc.abstractmethod
    def nodes(self) -> list[NodeInfo]:
        """The nodes replicas may be placed on (their comings and goings come by `poll`)."""

    @abc.abstractmethod
    def launch(self, launch: Launch) -> None:
        """Start a replica without waiting for it; raise LaunchError when it cannot start."""

    @abc.abstractmethod
    def stop(self, stop: Stop) -> None:
        """Signal a replica now; it is killed when `stop.grace` runs out. Never blocks."""

    @abc.abstractmethod
    def poll(self) -> list[Observation]:
        """Observations since the last poll: replicas started, exited, lost."""

    @abc.abstractmethod
    def adopt(self, launch_ids: list[str]) -> list[Observation]:
        """After a controller restart: track these launches again (those that ended while
        nobody watched are reported as ReplicaExited, those never started as LaunchFailed)."""

    @abc.abstractmethod
    def kill_node(self, node: str) -> None:
        """Chaos: SIGKILL every replica on `node` at once (its exits come through poll)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop watching (replicas keep running: a controller restart adopts them)."""

    # ---- capabilities: the defaults do nothing ------------------------------------------

    def hold_nodes(self, hold: HoldNodes) -> None:
        """The spare nodes (`spares: K`) one attempt of a job holds now (an empty tuple ends
        its hold), after each change and at the controller's start: kept allocated (Slurm,
        Kubernetes) or with warm pools full (Ray). Never blocks for long."""
        return

    def fence_nodes(self, fenced: dict[str, str]) -> None:
        """The quarantined nodes now (node -> reason), after each change and at the
        controller's start, for a backend whose scheduler enforces them too. Never blocks
        for long."""
        return

    def dump_stacks(self, launch_id: str, timeout: float, nonblocking: bool = False
                    ) -> StackDump:
        """Every Python thread's stack of a running replica (never raises); `nonblocking`
        reads without pausing it (a frame may then be torn)."""
        from perdure.backends.stacks import StackDump

        return StackDump(error=f"the {type(self).__name__} cannot capture stacks")


def route_address(host: str, port: int) -> str:
    """This machine's address on the way to `host` (where processes there reach it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), port))  # UDP: picks the route, sends nothing
        return str(s.getsockname()[0])


def error_info(error: object) -> ErrorInfo | None:
    """A recorded error (an exit record's, the error file's) as the core's ErrorInfo."""
    if not isinstance(error, dict):
        return None
    return ErrorInfo(  # credentials in a URL a replica printed stop here (perdure.secrecy)
        type=str(error.get("type", "")),
        message=redact(str(error.get("message", ""))),
        traceback=redact(str(error.get("traceback", ""))),
        source=str(error.get("source", "error_file")),
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def sent_error(directory: str, record: dict[str, Any]) -> dict[str, Any] | None:
    """The error file a failed replica sent the relay (in its launch's `directory`), if any."""
    if record.get("exit_code", 0) == 0:
        return None
    from perdure.runtime.errorfile import read_error_file
    from perdure.runtime.ranks import rank_file

    name = rank_file(statedir.ERROR, _int(record.get("local_rank")) or 0)
    return read_error_file(os.path.join(directory, name))


def exit_observation(launch_id: str, record: dict[str, Any],
                     error_file: dict[str, Any] | None) -> ReplicaExited | LaunchFailed:
    """A launch's exit record as the core's observation (`error_file`: what the replica sent
    the relay, which beats the supervisor's guess from stderr)."""
    if "exit_code" not in record:
        return LaunchFailed(launch_id, str(record.get("spawn_error")),
                            float(record.get("time", time.time())),
                            user_error=record.get("user_error") is True)
    rss = record.get("peak_rss_mb")
    return ReplicaExited(
        launch_id=launch_id, exit_code=int(record["exit_code"]), time=float(record["time"]),
        signal=_int(record.get("signal")), oom=bool(record.get("oom")),
        error=error_info(error_file or record.get("error")),
        peak_rss_mb=float(rss) if isinstance(rss, int | float) else None,
        local_rank=_int(record.get("local_rank")),
        stderr_tail=str(record.get("stderr_tail") or ""))
