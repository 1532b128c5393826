"""In-memory snapshots: each replica's state held in its own host memory and in a peer's.

`save` blocks training only for the copy into host buffers; a background thread sends it to
the peer's holder and to an optional node-local directory. `load` is a collective: the ranks
agree on the newest step every one of them can restore, so a replica killed mid-snapshot makes
everyone fall back to the previous one.

Side effects: a holder thread and socket, a background thread, files in holder_dir.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from perdure import statedir
from perdure.runtime import goodput
from perdure.runtime.checkpoint.worker import PersistWorker
from perdure.runtime.elastic import codec
from perdure.runtime.elastic import holder as hd
from perdure.runtime.elastic.state import Buffers, apply, capture, check_state, kind_of, unwrap
from perdure.runtime.peerring import choose_peer
from perdure.runtime.ranks import process_name
from perdure.runtime.transport import ENV_JOB_SECRET
from perdure.runtime.transport import current as current_transport

if TYPE_CHECKING:
    from perdure.runtime.elastic.manager import Manager

__all__ = ["SnapshotInfo", "Snapshotter", "choose_peer"]

log = logging.getLogger("perdure.elastic")
ENV_SNAPSHOT_DIR = "PERDURE_SNAPSHOT_DIR"


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot: its step, whose it is, its size, and where it is held or came from."""

    step: int
    replica: str
    time: float
    nbytes: int
    blocked_s: float = 0.0  # training time spent in save() (the copy)
    peer: str | None = None  # the replica whose holder has a copy (None: not replicated)
    source: str = "memory"  # for load(): "memory", "file" or "peer:<replica>"
    seconds: float = 0.0  # for load(): time to agree, fetch and apply


def _targets(state: Mapping[str, Any]) -> codec.Target:
    """The live tensor at each path a restore can read into (same dtype and shape, CPU)."""
    live: dict[codec.Path, torch.Tensor] = {}
    for key, wrapped in state.items():
        value = unwrap(wrapped)
        kind = kind_of(wrapped)
        tree = value.state_dict() if kind in ("module", "stateful") else value
        live.update(codec.tensor_paths(tree, (key,)))

    def target(path: codec.Path, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor | None:
        t = live.get(path)
        ok = (t is not None and t.dtype == dtype and tuple(t.shape) == shape
              and t.device.type == "cpu" and t.is_contiguous())
        return t if ok else None

    return target


class Snapshotter:
    """Keep this replica's state in host memory and in a peer's, every time `save` is called.

    manager: says who the peer is (default: the one this process made). keep: snapshots kept
    per replica; 2 lets ranks agree on an older step when a replica died mid-replication.
    holder_dir: a node-local directory (default $PERDURE_SNAPSHOT_DIR) where snapshots are
    also written, under <job id>/<replica>/, to outlive the worker; not removed at exit.
    replicate: send each snapshot to the peer's holder (needs the job's rendezvous).
    """

    def __init__(
        self,
        manager: Manager | None = None,
        *,
        keep: int = 2,
        holder_dir: str | os.PathLike[str] | None = None,
        replicate: bool = True,
    ) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep={keep!r} must be an int >= 1")
        from perdure.runtime.elastic.manager import current_manager

        self.manager = manager or current_manager()
        self.keep = keep
        self.replica = self.manager.replica if self.manager else os.environ.get(
            "PERDURE_REPLICA", "worker-0")
        chosen = holder_dir or os.environ.get(ENV_SNAPSHOT_DIR)
        job = os.environ.get("PERDURE_JOB_ID", "local")
        own = process_name(self.replica, os.environ)
        self.holder_dir = Path(chosen) / job / own if chosen else None
        # holders are registered and found through the job's rendezvous, if it has one
        found = self.manager.transport if self.manager else current_transport()
        self._transport = found if replicate and found.elastic else None
        self._secret = os.environ.get(ENV_JOB_SECRET, "")
        if self._transport is not None and not self._secret:
            log.warning("snapshots are not replicated to a peer: $%s is not set (perdure "
                        "sets it for every replica it launches)", ENV_JOB_SECRET)
            self._transport = None
        self._holder: hd.Holder | None = None
        if self._transport is not None:
            host = hd.bind_host()
            self._holder = hd.Holder(keep=keep, host=host, secret=self._secret,
                                     allowed=self._is_job_replica)
            self._transport.register_holder({"replica": self.replica,
                                             "host": hd.advertise_host(host),
                                             "port": self._holder.port, "pid": os.getpid()})
        self._own: dict[int, tuple[int, dict[str, Any]]] = {}  # step -> (slot, tree)
        self._buffers = [Buffers() for _ in range(keep)]
        self._slot = 0
        # one thread for every save; a snapshot still in flight at exit is of no use to anyone
        self._worker = PersistWorker("perdure-snapshot", lower=False, finish_at_exit=False)
        self._done: threading.Event | None = None  # set once the last save was replicated
        self._error: BaseException | None = None
        self._latest: SnapshotInfo | None = None
        self.skipped = 0

    def _is_job_replica(self, name: str) -> bool:
        """A member of the current round, or registered as a holder: only these are stored."""
        if self.manager is not None and any(m.replica == name for m in self.manager.members):
            return True
        return any(a.replica == name for a in self._registered())

    def _registered(self) -> list[hd.HolderAddress]:
        if self._transport is None:
            return []
        out = []
        for doc in self._transport.holders():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                out.append(hd.HolderAddress(str(doc["replica"]), str(doc["host"]),
                                            int(doc["port"])))
        return out

    # ---- saving ---------------------------------------------------------------------------

    @property
    def in_flight(self) -> bool:
        """True while the last save is still being replicated."""
        return self._done is not None and not self._done.is_set()

    @property
    def latest(self) -> SnapshotInfo | None:
        """The newest snapshot whose copy and replication finished, or None."""
        return self._latest

    def save(self, step: int, state: Mapping[str, Any]) -> bool:
        """Snapshot `state` as `step`: True if taken, False if skipped (one still in flight).

        Blocks only for the copy into host buffers. Raises the error of an earlier failed
        background save, once.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step={step!r} must be an int >= 0")
        self._raise_error()
        if self.in_flight:
            self.skipped += 1
            return False
        check_state(state)
        began = time.perf_counter()
        slot = self._slot
        self._slot = (self._slot + 1) % self.keep
        # the slot's previous snapshot is overwritten now: forget it first
        self._own = {s: (i, t) for s, (i, t) in self._own.items() if i != slot}
        tree = capture(state, self._buffers[slot])
        self._own[step] = (slot, tree)
        info = SnapshotInfo(step, self.replica, time.time(), self._buffers[slot].nbytes,
                            time.perf_counter() - began)
        self._done = self._worker.submit(lambda: self._replicate(tree, info))
        return True

    def _replicate(self, tree: dict[str, Any], info: SnapshotInfo) -> None:
        try:
            chunks = codec.encode(tree)  # views of the host buffers: nothing is copied
            if self.holder_dir is not None:
                self._write_file(info.step, chunks)
            peer = self._send_to_peer(info.step, chunks)
            self._latest = replace(info, peer=peer)
        except BaseException as exc:  # kept and raised at the next save() or join()
            self._error = exc

    def _send_to_peer(self, step: int, chunks: list[memoryview]) -> str | None:
        peer = self._peer()
        if peer is None or self._transport is None:
            return None
        addr = next((a for a in self._registered() if a.replica == peer), None)
        if addr is None:
            log.warning("snapshot of step %d not replicated: %s has no holder", step, peer)
            return None
        try:
            hd.put(addr, self.replica, step, chunks, secret=self._secret)
        except OSError as exc:  # the peer is gone: a membership change, not a save failure
            log.warning("snapshot of step %d not replicated to %s: %s", step, peer, exc)
            return None
        return peer

    def _peer(self) -> str | None:
        if self._transport is None:
            return None
        members = self.manager.members if self.manager else ()
        if members:
            return choose_peer([(m.replica, m.node) for m in members], self.replica)
        others = sorted(a.replica for a in self._registered()
                        if a.replica != self.replica)
        return others[0] if others else None

    def _write_file(self, step: int, chunks: list[memoryview]) -> None:
        assert self.holder_dir is not None
        statedir.private_dirs(self.holder_dir)  # weights: the user's only (/dev/shm)
        statedir.write_atomically(self.holder_dir / f"snap-{step:012d}.bin", chunks)
        for old in sorted(self.holder_dir.glob("snap-*.bin"))[:-self.keep]:
            old.unlink(missing_ok=True)

    def join(self) -> None:
        """Block until the last save is replicated; raise its error (once) if it failed."""
        if self._done is not None:
            self._done.wait()
        self._raise_error()

    def _raise_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    # ---- loading --------------------------------------------------------------------------

    def available(self) -> dict[int, str]:
        """Steps of this replica's snapshots that can be restored here, and from where."""
        found: dict[int, str] = {}
        if self._transport is not None:
            for addr in self._registered():
                if addr.replica == self.replica:
                    continue
                for step in hd.list_steps(addr, self.replica, secret=self._secret):
                    found.setdefault(step, f"peer:{addr.replica}")
        if self.holder_dir is not None:
            for path in self.holder_dir.glob("snap-*.bin"):
                found[int(path.stem.split("-")[1])] = "file"
        for step in self._own:
            found[step] = "memory"
        return found

    def load(self, state: MutableMapping[str, Any]) -> SnapshotInfo | None:
        """Restore the newest snapshot step that every rank holds; None when there is none.

        A collective when distributed: call it on every rank at the same point. Reads own
        memory, else a node-local file, else a peer's memory; never persistent storage.
        """
        began = time.perf_counter()
        self.join_quietly()
        check_state(state)
        found = self.available()
        step = _agree(sorted(found))
        if step is None:
            return None
        source = found[step]
        tree = self._read(step, source, state)
        apply(state, tree)
        seconds = time.perf_counter() - began
        goodput.snapshot_restored(step, seconds, source)  # the controller counts where from
        return SnapshotInfo(step, self.replica, time.time(), 0, source=source, seconds=seconds)

    def join_quietly(self) -> None:
        """Wait for an in-flight save; its error is logged, not raised (restore goes on)."""
        try:
            self.join()
        except Exception as exc:
            log.warning("the last snapshot failed: %s", exc)

    def _read(self, step: int, source: str, state: Mapping[str, Any]) -> Any:
        """The snapshot's tree; from a file or a peer, read straight into `state`'s tensors."""
        if source == "memory":
            return self._own[step][1]
        into = _targets(state)
        if source == "file":
            assert self.holder_dir is not None
            path = self.holder_dir / f"snap-{step:012d}.bin"
            with path.open("rb") as f:
                return codec.read(codec.file_reader(f, str(path)), path.stat().st_size, into)
        peer = source.split(":", 1)[1]
        addr = next(a for a in self._registered() if a.replica == peer)
        return hd.fetch(addr, self.replica, step,
                        lambda read_into, size: codec.read(read_into, size, into),
                        secret=self._secret)

    def close(self) -> None:
        """Wait for the last save, then stop serving peers' snapshots."""
        self.join_quietly()
        self._worker.close()
        if self._holder is not None:
            self._holder.close()
            self._holder = None


def _agree(mine: list[int]) -> int | None:
    """The newest step in every rank's list (a collective when distributed), or None."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return mine[-1] if mine else None
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    common = set(everyone[0]).intersection(*map(set, everyone[1:]))
    return max(common) if common else None
