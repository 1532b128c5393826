"""Peer memory for snapshots: a TCP server in every replica that keeps others' newest ones.

Only the job's replicas are served (wire.py), a `put` must name one of them and fit under
`max_bytes` before anything is allocated, and a transfer cut short is never stored.
Requests: `put` {replica, step, size} -> {ready}, payload -> {ok}; `list` {replica} ->
{steps}; `get` {replica, step} -> {size} + payload.

Side effects: a listening socket and its threads.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import socketserver
import threading
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any, TypeVar

from perdure.runtime.elastic import wire
from perdure.runtime.elastic.wire import interface_for
from perdure.runtime.transport.base import ENV_JOB_SECRET
from perdure.runtime.transport.wire import recv_exact, recv_into

__all__ = ["Holder", "HolderAddress", "fetch", "list_steps", "put"]

log = logging.getLogger("perdure.elastic")
T = TypeVar("T")
ENV_MAX_BYTES = "PERDURE_SNAPSHOT_MAX_BYTES"
MAX_CONNECTIONS = 64  # at once; more are closed at once (a flood ties up no threads)


@dataclass(frozen=True)
class HolderAddress:
    """Where one replica's holder listens."""

    replica: str
    host: str
    port: int


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        holder = self.server.holder
        try:
            conn = wire.Accepted(sock, holder.secret)
            request = conn.request()
            if request is None:
                return  # not the job's: told so, nothing read past the header
            op = request.get("op")
            if op == "put":
                self._put(conn, request)
            elif op == "list":
                conn.reply({"ok": True, "steps": holder.steps(_name(request))})
            elif op == "get":
                name, step = _name(request), _step(request)
                payload = holder.get(name, step)
                if payload is None:
                    conn.reply({"ok": False, "error": f"no step {step} of {name}"})
                else:
                    conn.reply({"ok": True, "size": len(payload)}, payload)
            else:
                conn.reply({"ok": False, "error": f"unknown op {op!r}"})
        except (ConnectionError, OSError, ValueError, KeyError, TypeError) as exc:
            # a sender that died mid-transfer, or a malformed request: nothing was stored
            log.debug("snapshot holder: dropped a request: %s", exc)
        finally:
            self.server.slots.release()

    def _put(self, conn: wire.Accepted, request: dict[str, Any]) -> None:
        holder = self.server.holder
        replica, step, size = _name(request), _step(request), request.get("size")
        problem = holder.refuse(replica, size)
        if problem:
            conn.reply({"ok": False, "error": problem})
            return
        assert isinstance(size, int)
        conn.reply({"ok": True, "ready": True})
        payload = recv_exact(conn.sock, size)  # allocated only now: authenticated and under the cap
        holder.store(replica, step, payload)
        conn.reply({"ok": True})


def _name(request: dict[str, Any]) -> str:
    name = request.get("replica")
    if not isinstance(name, str):
        raise ValueError(f"replica {name!r} is not a name")
    return name


def _step(request: dict[str, Any]) -> int:
    step = request.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step {step!r} is not an int >= 0")
    return step


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # a burst of peers (all ranks restoring) waits for no SYN retry

    def __init__(self, address: tuple[str, int], holder: Holder) -> None:
        self.holder = holder
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # too many at once: this one waits for nothing
            return
        super().process_request(request, client_address)


class Holder:
    """This replica's store of its peers' snapshots (only `allowed` names, at most `max_bytes`
    each), served over TCP from a daemon thread bound to `host`."""

    def __init__(self, keep: int = 2, host: str = "127.0.0.1", *, secret: str,
                 allowed: Callable[[str], bool], max_bytes: int | None = None) -> None:
        if not secret:
            raise ValueError(f"a snapshot holder needs the job's secret (${ENV_JOB_SECRET})")
        wire.check_bind(host, "host")
        self.keep = keep
        self.secret = secret
        self.allowed = allowed
        if max_bytes is None:  # $PERDURE_SNAPSHOT_MAX_BYTES, else half of RAM
            raw = os.environ.get(ENV_MAX_BYTES)
            if raw and (not raw.isdigit() or int(raw) <= 0):
                raise ValueError(f"{ENV_MAX_BYTES}={raw!r} must be a positive number of bytes")
            ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            max_bytes = int(raw) if raw else ram // 2
        self.max_bytes = max_bytes
        self._held: dict[str, dict[int, bytes | bytearray]] = {}  # replica -> step -> payload
        self._lock = threading.Lock()
        self._server = _Server((host, 0), self)
        self.port = int(self._server.server_address[1])
        # close() waits for the loop's next poll: keep a replica's exit quick
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="perdure-snapshot-holder", daemon=True)
        self._thread.start()

    def refuse(self, replica: str, size: object) -> str:
        """Why a put of `size` bytes for `replica` is refused; "" when it is taken."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return f"size {size!r} is not an int >= 0"
        if size > self.max_bytes:
            return (f"a snapshot of {size} bytes is over the holder's limit of "
                    f"{self.max_bytes} (${ENV_MAX_BYTES})")
        if not self.allowed(replica):
            return f"{replica!r} is not a replica of this job"
        return ""

    def store(self, replica: str, step: int, payload: bytes | bytearray) -> None:
        with self._lock:
            held = self._held.setdefault(replica, {})
            held[step] = payload
            for old in sorted(held)[:-self.keep]:
                del held[old]

    def steps(self, replica: str) -> list[int]:
        with self._lock:
            return sorted(self._held.get(replica, {}))

    def get(self, replica: str, step: int) -> bytes | bytearray | None:
        with self._lock:
            return self._held.get(replica, {}).get(step)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(len(p) for held in self._held.values() for p in held.values())

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _open(addr: HolderAddress, secret: str, timeout: float) -> closing[wire.Connected]:
    return closing(wire.Connected(addr.host, addr.port, secret, timeout, f"holder {addr.replica}"))


def put(addr: HolderAddress, replica: str, step: int, chunks: Sequence[bytes | memoryview], *,
        secret: str, timeout: float = 30.0) -> None:
    """Send `replica`'s snapshot of `step` (`chunks`, not joined first); OSError on failure."""
    size = sum(memoryview(c).nbytes for c in chunks)
    with _open(addr, secret, timeout) as conn:
        conn.ask({"op": "put", "replica": replica, "step": step, "size": size})
        for chunk in chunks:
            conn.sock.sendall(chunk)
        conn.answer()


def list_steps(addr: HolderAddress, replica: str, *, secret: str,
               timeout: float = 2.0) -> list[int]:
    """Steps of `replica`'s snapshots held at `addr`; [] when it is gone or not the job's."""
    try:
        with _open(addr, secret, timeout) as conn:
            reply = conn.ask({"op": "list", "replica": replica})
    except (OSError, ValueError):  # gone, or its port now belongs to something else
        return []
    steps = reply.get("steps")
    return [s for s in steps if isinstance(s, int)] if isinstance(steps, list) else []


def fetch(addr: HolderAddress, replica: str, step: int,
          read: Callable[[Callable[[memoryview], None], int], T], *, secret: str,
          timeout: float = 60.0) -> T:
    """`read(read_into, size)` over `replica`'s snapshot of `step` at `addr` (OSError)."""
    with _open(addr, secret, timeout) as conn:
        reply = conn.ask({"op": "get", "replica": replica, "step": step})
        return read(functools.partial(recv_into, conn.sock), int(reply["size"]))


def bind_host() -> str:
    """`$PERDURE_SNAPSHOT_BIND`, else the interface toward MASTER_ADDR, else (a loopback one)
    toward the relay at `$PERDURE_CONTROL_ADDR`; never a wildcard (ValueError)."""
    chosen = os.environ.get("PERDURE_SNAPSHOT_BIND")
    if chosen is not None:
        wire.check_bind(chosen, "PERDURE_SNAPSHOT_BIND")
        return chosen
    bound = interface_for(os.environ.get("MASTER_ADDR", "127.0.0.1"))
    control = os.environ.get("PERDURE_CONTROL_ADDR", "").rpartition(":")[0].strip("[]")
    if bound in ("127.0.0.1", "::1") and control:
        return interface_for(control)
    return bound


def advertise_host(bound: str) -> str:
    """The address peers reach the holder at: `$PERDURE_SNAPSHOT_HOST`, else the bound one."""
    return os.environ.get("PERDURE_SNAPSHOT_HOST") or bound

