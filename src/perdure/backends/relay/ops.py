"""What the relay does for each request of an authenticated replica (a table of operations).

Every operation acts for the peer that authenticated: its job's rendezvous files and stores,
its launch's progress, errors and stop request, written with the file transport itself.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from perdure import statedir
from perdure.runtime.ranks import rank_file
from perdure.runtime.transport.files import FileTransport

if TYPE_CHECKING:
    from collections.abc import Collection

    from perdure.backends.relay.kv import KV, Stores



@dataclass(frozen=True)
class Peer:
    """Who is asking: proven in the handshake."""

    job: str
    replica: str
    launch: str


class Relay(Protocol):
    """What an operation needs of server.Relay (the server imports its operations)."""

    files: RelayFiles
    stores: Stores

    def names_of(self, job: str) -> Collection[str] | None: ...


class RelayFiles:
    """The file transports of jobs (rendezvous) and launches (progress, error, stop)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._acked: dict[str, tuple[str, int]] = {}
        self._made: set[str] = set()  # launch dirs known to exist (a mkdir per report is slow)
        self._lock = threading.Lock()

    def rdzv(self, peer: Peer) -> FileTransport:
        return FileTransport(rdzv_dir=Path(statedir.rendezvous_dir(self.state_dir, peer.job)))

    def launch_dir(self, peer: Peer) -> Path:
        d = Path(statedir.launch_dir(self.state_dir, peer.launch))
        if peer.launch not in self._made:
            d.mkdir(parents=True, exist_ok=True)  # a backend that keeps none here (Ray)
            self._made.add(peer.launch)
        return d

    def launch(self, peer: Peer) -> FileTransport:
        d = self.launch_dir(peer)
        return FileTransport(report_dir=d, stop_file=str(d / statedir.STOP),
                             error_file=str(d / statedir.ERROR))

    def append_progress(self, peer: Peer, client: str, seq: int, lines: list[str]) -> None:
        """Append a batch once, even when the replica re-sends it (its answer was lost)."""
        d = self.launch_dir(peer)
        with self._lock:  # one launch's batches arrive one at a time; this keeps them whole
            acked = self._acked.get(peer.launch) or _read_acked(d / statedir.PROGRESS_ACKED)
            if acked == (client, seq) or (acked[0] == client and acked[1] >= seq):
                return
            FileTransport(report_dir=d).append_progress(lines)
            self._acked[peer.launch] = (client, seq)
            _write_acked(d / statedir.PROGRESS_ACKED, client, seq)


def _write_acked(path: Path, client: str, seq: int) -> None:
    """One fixed-size write in place (cheaper than a rename per report; a torn record only
    counts a batch re-sent across a controller crash twice)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, f"{client[:32]:<32} {seq:020d}\n".encode(), 0)
    finally:
        os.close(fd)


def _read_acked(path: Path) -> tuple[str, int]:
    try:
        client, seq = path.read_text().split()
        return client, int(seq)
    except (OSError, ValueError):
        return "", 0


def _lines(value: Any) -> list[str]:
    """Progress lines as sent, each a JSON object (anything else is dropped)."""
    if not isinstance(value, list):
        raise TypeError("progress lines must be a list of strings")
    out = []
    for line in value:
        if isinstance(line, str) and "\n" not in line and line.startswith("{"):
            out.append(line)
    return out


def _holder(relay: Relay, peer: Peer, req: dict[str, Any]) -> None:
    rec = req["record"]
    if not isinstance(rec, dict) or rec.get("replica") != peer.replica:
        raise ValueError(f"{peer.replica} may register only its own holder")
    record = {"replica": peer.replica, "host": str(rec["host"])[:255], "port": int(rec["port"]),
              "pid": int(rec.get("pid", 0))}
    relay.files.rdzv(peer).register_holder(record)


def _error(relay: Relay, peer: Peer, req: dict[str, Any]) -> str | None:
    record = req["record"]
    if not isinstance(record, dict):
        raise TypeError("an error record must be a JSON object")
    rank = record.get("local_rank")  # a replica's other processes have files of their own
    rank = rank if isinstance(rank, int) and 0 < rank < 1024 else 0
    error_file = relay.files.launch_dir(peer) / rank_file(statedir.ERROR, rank)
    return FileTransport(error_file=str(error_file)).write_error(record)


# Store operations, on the peer's job's store `req["store"]`.
_KV_OPS: dict[str, Callable[[KV, dict[str, Any]], Any]] = {
    "set": lambda kv, req: kv.set(str(req["key"]), str(req["value"])),
    "get": lambda kv, req: kv.get(str(req["key"])),
    "add": lambda kv, req: kv.add(str(req["key"]), int(req["amount"]), str(req["c"]),
                                  int(req["i"])),
    "cas": lambda kv, req: kv.cas(str(req["key"]), str(req["expected"]), str(req["desired"])),
    "append": lambda kv, req: kv.append(str(req["key"]), str(req["value"])),
    "delete": lambda kv, req: kv.delete(str(req["key"])),
    "check": lambda kv, req: kv.wait([str(k) for k in req["keys"]], 0.0),
    "wait": lambda kv, req: kv.wait([str(k) for k in req["keys"]], float(req["hold"])),
    "num_keys": lambda kv, req: kv.num_keys(),
}


def _kv(op: Callable[[KV, dict[str, Any]], Any]) -> Callable[[Relay, Peer, dict[str, Any]], Any]:
    return lambda relay, peer, req: op(relay.stores.get(peer.job, str(req["store"])), req)


def _since(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else None


OPS: dict[str, Callable[[Relay, Peer, dict[str, Any]], Any]] = {
    "round": lambda relay, peer, req: dict(zip(
        ("stamp", "doc"), relay.files.rdzv(peer).round_doc(_since(req.get("since"))),
        strict=True)),
    "ready": lambda relay, peer, req: relay.files.rdzv(peer).mark_ready(
        int(req["attempt"]), peer.replica, int(req["round"])),
    "ready_round": lambda relay, peer, req: relay.files.rdzv(peer).ready_round(
        int(req["attempt"]), _replica(relay, peer, req["replica"])),
    "finished": lambda relay, peer, req: relay.files.rdzv(peer).mark_finished(
        int(req["attempt"]), peer.replica, int(req["round"])),
    "is_finished": lambda relay, peer, req: relay.files.rdzv(peer).finished(int(req["attempt"])),
    "holder": _holder,
    "holders": lambda relay, peer, req: relay.files.rdzv(peer).holders(),
    "stop": lambda relay, peer, req: relay.files.launch(peer).stop_request(),
    "error": _error,
    "progress": lambda relay, peer, req: relay.files.append_progress(
        peer, str(req["c"]), int(req["seq"]), _lines(req["lines"])),
    **{f"kv.{name}": _kv(op) for name, op in _KV_OPS.items()},
}


def _replica(relay: Relay, peer: Peer, name: Any) -> str:
    """`name` if it is a replica of the peer's job (markers of others are read, not written)."""
    names = relay.names_of(peer.job) or ()
    if name not in names:
        raise ValueError(f"{str(name)[:64]!r} is not a replica of job {peer.job}")
    return str(name)
