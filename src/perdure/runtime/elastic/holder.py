"""Peer memory for snapshots: a small TCP server in every replica that holds others' snapshots.

Each replica runs one `Holder` (a daemon thread) and registers its address in
`<registry>/<replica>.json` (under the job's rendezvous directory). A replica sends each
snapshot to its peer's holder, which keeps the newest `keep` complete snapshots per replica in
host memory; a replacement asks the holders for its own snapshots and fetches one, so it
restores without reading persistent storage. A transfer cut short (the sender died mid-send) is
discarded, never stored.

Wire format, both ways: 8-byte big-endian header length, a JSON header, then `size` payload
bytes. Requests: `put` {replica, step, size, meta} + payload; `list` {replica} -> {steps};
`get` {replica, step} -> {size, meta} + payload. Payloads are opaque bytes here (codec.py's
format: a JSON header and raw tensor bytes, no pickle).

Side effects: a listening socket and its threads; registry files.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["Holder", "HolderAddress", "fetch", "fetch_with", "list_steps", "put", "registered"]

log = logging.getLogger("perdure.elastic")
T = TypeVar("T")
_HEADER = struct.Struct(">Q")
_MAX_HEADER = 1 << 20
_CHUNK = 1 << 20


@dataclass(frozen=True)
class HolderAddress:
    """Where one replica's holder listens."""

    replica: str
    host: str
    port: int
    pid: int = 0


@dataclass
class _Held:
    step: int
    payload: bytes | bytearray
    meta: dict[str, Any] = field(default_factory=dict)


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    out = bytearray(n)  # filled in place: a snapshot is received without an extra copy
    view = memoryview(out)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, _CHUNK))
        if k == 0:
            raise ConnectionError(f"peer closed the connection after {got} of {n} bytes")
        got += k
    return out


def _send(sock: socket.socket, header: dict[str, Any], payload: bytes | bytearray = b"") -> None:
    body = json.dumps(header).encode()
    sock.sendall(_HEADER.pack(len(body)) + body)
    if payload:
        sock.sendall(payload)


def _recv_header(sock: socket.socket) -> dict[str, Any]:
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if n > _MAX_HEADER:
        raise ConnectionError(f"header of {n} bytes is over the {_MAX_HEADER}-byte limit")
    doc = json.loads(_recv_exact(sock, n))
    if not isinstance(doc, dict):
        raise ConnectionError("header is not a JSON object")
    return doc


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        try:
            header = _recv_header(sock)
            op = header.get("op")
            if op == "put":
                payload = _recv_exact(sock, int(header["size"]))
                self.server.holder.store(str(header["replica"]), int(header["step"]), payload,
                                         dict(header.get("meta") or {}))
                _send(sock, {"ok": True})
            elif op == "list":
                _send(sock, {"ok": True, "steps": self.server.holder.steps(str(header["replica"]))})
            elif op == "get":
                held = self.server.holder.get(str(header["replica"]), int(header["step"]))
                if held is None:
                    _send(sock, {"ok": False, "error": "no such snapshot"})
                else:
                    _send(sock, {"ok": True, "size": len(held.payload), "meta": held.meta},
                          held.payload)
            else:
                _send(sock, {"ok": False, "error": f"unknown op {op!r}"})
        except (ConnectionError, OSError, ValueError, KeyError) as exc:
            # a sender that died mid-transfer: nothing was stored
            log.debug("snapshot holder: dropped a request: %s", exc)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], holder: Holder) -> None:
        self.holder = holder
        super().__init__(address, _Handler)


class Holder:
    """This replica's store of its peers' snapshots, served over TCP from a daemon thread."""

    def __init__(self, keep: int = 2, host: str = "127.0.0.1") -> None:
        self.keep = keep
        self._held: dict[str, list[_Held]] = {}
        self._lock = threading.Lock()
        self._server = _Server((host, 0), self)
        self.port = int(self._server.server_address[1])
        self.host = host
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="perdure-snapshot-holder", daemon=True)
        self._thread.start()

    def store(self, replica: str, step: int, payload: bytes | bytearray,
              meta: dict[str, Any]) -> None:
        with self._lock:
            held = [h for h in self._held.get(replica, []) if h.step != step]
            held.append(_Held(step, payload, meta))
            held.sort(key=lambda h: h.step)
            self._held[replica] = held[-self.keep:]

    def steps(self, replica: str) -> list[int]:
        with self._lock:
            return [h.step for h in self._held.get(replica, [])]

    def get(self, replica: str, step: int) -> _Held | None:
        with self._lock:
            return next((h for h in self._held.get(replica, []) if h.step == step), None)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(len(h.payload) for held in self._held.values() for h in held)

    def register(self, registry: Path, replica: str, advertise: str) -> None:
        """Publish this holder's address as `replica`'s (temp + rename)."""
        registry.mkdir(parents=True, exist_ok=True)
        path = registry / f"{replica}.json"
        tmp = registry / f".{replica}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"replica": replica, "host": advertise, "port": self.port,
                                   "pid": os.getpid()}))
        os.replace(tmp, path)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def registered(registry: Path) -> list[HolderAddress]:
    """Every holder address in `registry` (stale ones included: their connections fail)."""
    out = []
    for path in sorted(registry.glob("*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            doc = json.loads(path.read_text())
            out.append(HolderAddress(str(doc["replica"]), str(doc["host"]), int(doc["port"]),
                                     int(doc.get("pid", 0))))
    return out


def _connect(addr: HolderAddress, timeout: float) -> socket.socket:
    sock = socket.create_connection((addr.host, addr.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def put(addr: HolderAddress, replica: str, step: int, chunks: Sequence[bytes | memoryview],
        meta: dict[str, Any], timeout: float = 30.0) -> None:
    """Send `replica`'s snapshot of `step` (the concatenation of `chunks`) to the holder at
    `addr`; raise OSError on failure. The chunks are sent as they are, not joined first."""
    size = sum(memoryview(c).nbytes for c in chunks)
    with _connect(addr, timeout) as sock:
        _send(sock, {"op": "put", "replica": replica, "step": step, "size": size,
                     "meta": meta})
        for chunk in chunks:
            sock.sendall(chunk)
        reply = _recv_header(sock)
    if not reply.get("ok"):
        raise ConnectionError(f"holder {addr.replica} refused the snapshot: {reply}")


def list_steps(addr: HolderAddress, replica: str, timeout: float = 2.0) -> list[int]:
    """Steps of `replica`'s snapshots the holder at `addr` has; [] when it cannot be reached."""
    try:
        with _connect(addr, timeout) as sock:
            _send(sock, {"op": "list", "replica": replica})
            reply = _recv_header(sock)
    except (OSError, ValueError):  # gone, or its port now belongs to something else
        return []
    return [int(s) for s in reply.get("steps", [])] if reply.get("ok") else []


def fetch_with(addr: HolderAddress, replica: str, step: int,
               read: Callable[[Callable[[memoryview], None], int], T],
               timeout: float = 60.0) -> T:
    """`read(read_into, size)` over `replica`'s snapshot of `step` from the holder at `addr`:
    the payload is read where `read` puts it (raises OSError on failure)."""
    with _connect(addr, timeout) as sock:
        _send(sock, {"op": "get", "replica": replica, "step": step})
        reply = _recv_header(sock)
        if not reply.get("ok"):
            raise ConnectionError(f"holder {addr.replica} has no step {step} of {replica}")

        def read_into(view: memoryview) -> None:
            view = view.cast("B")
            got = 0
            while got < view.nbytes:
                k = sock.recv_into(view[got:], min(view.nbytes - got, _CHUNK))
                if k == 0:
                    raise ConnectionError(f"holder {addr.replica} closed the connection")
                got += k

        return read(read_into, int(reply["size"]))


def fetch(addr: HolderAddress, replica: str, step: int, timeout: float = 60.0) -> bytearray:
    """`replica`'s snapshot of `step` from the holder at `addr`, in one buffer."""

    def whole(read_into: Callable[[memoryview], None], size: int) -> bytearray:
        buf = bytearray(size)
        read_into(memoryview(buf))
        return buf

    return fetch_with(addr, replica, step, whole, timeout)
