"""The one contract between a replica's runtime and the controller, whatever carries it.

Rounds, markers, round stores, holder addresses, the stop notice, the error record and
progress all go through a `Transport`: `FileTransport` or `NetTransport`, callers never know
which.

No side effects: the protocol and the environment's names.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol

__all__ = [
    "ENV_CONTROL_ADDR",
    "ENV_JOB_SECRET",
    "ENV_RDZV",
    "ENV_TRANSPORT",
    "HolderRecord",
    "Transport",
    "TransportError",
]

ENV_TRANSPORT = "PERDURE_TRANSPORT"  # "file" (default) or "net"
ENV_CONTROL_ADDR = "PERDURE_CONTROL_ADDR"  # host:port of the controller's relay (net)
ENV_JOB_SECRET = "PERDURE_JOB_SECRET"  # the per-job secret the relay checks (net)
ENV_RDZV = "PERDURE_RDZV"  # "1": the job is elastic (net; file has PERDURE_RDZV_DIR)

HolderRecord = dict[str, Any]  # {"replica", "host", "port", "pid"}


class TransportError(RuntimeError):
    """The controller could not be reached (or refused) within the operation's bounds."""


class Transport(Protocol):
    """What a replica's runtime exchanges with the controller (see the module docstring)."""

    kind: str  # "file" or "net"

    @property
    def elastic(self) -> bool:
        """Whether the controller publishes membership rounds for this job."""
        ...

    @property
    def reports(self) -> bool:
        """Whether progress records go anywhere (false outside perdure)."""
        ...

    def where(self) -> str:
        """Where the rendezvous lives, for messages (a directory, or the relay's address)."""
        ...

    # ---- membership rounds and markers ---------------------------------------------------

    def round_doc(self, since: Hashable | None) -> tuple[Hashable | None, Any]:
        """(stamp, the published round's JSON document); (stamp, None) when the stamp equals
        `since` or nothing is published. ValueError when the document is not JSON."""
        ...

    def mark_ready(self, attempt: int, replica: str, round_no: int) -> None: ...

    def ready_round(self, attempt: int, replica: str) -> int | None: ...

    def mark_finished(self, attempt: int, replica: str, round_no: int) -> None: ...

    def finished(self, attempt: int) -> bool: ...

    def round_store(self, name: str) -> Any:
        """The torch.distributed.Store named `name` that a round's members meet in."""
        ...

    # ---- snapshot holders ----------------------------------------------------------------

    def register_holder(self, record: HolderRecord) -> None: ...

    def holders(self) -> list[HolderRecord]: ...

    # ---- notices, errors, progress -------------------------------------------------------

    def stop_request(self) -> dict[str, Any] | None:
        """The stop request written before this replica was signalled, or None (none, or
        none readable). Called from a signal handler: bounded in time."""
        ...

    def write_error(self, payload: dict[str, Any]) -> str | None:
        """Deliver the replica's error record; where it went, or None (nowhere to put it)."""
        ...

    def append_progress(self, lines: list[str]) -> None:
        """Append JSON lines to this launch's progress record (never blocks on the network)."""
        ...

    def flush_progress(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds until appended lines are delivered; True if they are."""
        ...
