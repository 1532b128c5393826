"""The backend protocol: a small surface the controller drives (launch / stop / poll / nodes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from perdure.core.events import Launch, Observation, Stop


class LaunchError(RuntimeError):
    """The backend could not start a replica: an internal error, or with `user_error` one in
    the spec that no retry fixes (a missing working directory, a command not found)."""

    def __init__(self, message: str, *, user_error: bool = False) -> None:
        super().__init__(message)
        self.user_error = user_error


@dataclass(frozen=True)
class NodeInfo:
    name: str
    slots: int


class Backend(Protocol):
    def nodes(self) -> list[NodeInfo]:
        """The nodes replicas may be placed on (health is the controller's business)."""
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

    def close(self) -> None:
        """Stop watching (replicas keep running: a controller restart adopts them)."""
        ...
