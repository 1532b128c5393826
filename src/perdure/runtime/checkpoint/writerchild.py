"""The writer process of process mode: ``python -m perdure.runtime.checkpoint.writerchild``.

It maps the training process's staging memfd and writes shard files from it, off the training
process's GIL. It imports only torch (no DCP), to start fast, and dies with its parent.

Protocol: 8-byte length + JSON frames. ``map`` (then one byte carrying the memfd) installs the
buffer and its slots; ``write`` lists payloads (a slot number, or base64 bytes) and the
checksum algorithm; the reply carries each payload's (offset, length, checksum) and the
file's checksum, or the error.
"""

from __future__ import annotations

import base64
import ctypes
import json
import mmap
import os
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import Any

import torch

from perdure.runtime.checkpoint.shared import Slot, dtype_from_name, view_slot
from perdure.runtime.checkpoint.worker import lower_this_thread
from perdure.runtime.checkpoint.writer import write_payloads

_HEADER = struct.Struct("!Q")


def send_frame(sock: socket.socket, doc: dict[str, Any]) -> None:
    """Send one JSON frame."""
    payload = json.dumps(doc).encode()
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> dict[str, Any] | None:
    """Receive one JSON frame; None when the other side has gone."""
    head = _recv_exact(sock, _HEADER.size)
    if head is None:
        return None
    body = _recv_exact(sock, _HEADER.unpack(head)[0])
    return None if body is None else dict(json.loads(body))


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)


def _map(sock: socket.socket, doc: dict[str, Any], old: mmap.mmap | None) -> tuple[Any, list[Any]]:
    _, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if old is not None:
        old.close()
    mapped = mmap.mmap(fds[0], doc["size"])
    os.close(fds[0])
    slots = [view_slot(mapped, Slot(s["start"], s["nbytes"], dtype_from_name(s["dtype"]),
                                    tuple(s["shape"]))) for s in doc["slots"]]
    return mapped, slots


def _write(doc: dict[str, Any], slots: list[torch.Tensor]) -> dict[str, Any]:
    payloads: list[torch.Tensor | bytes] = [
        slots[item["slot"]] if "slot" in item else base64.b64decode(item["bytes"])
        for item in doc["items"]
    ]
    written = write_payloads(Path(doc["path"]), payloads, fsync=doc["fsync"],
                             algorithm=doc["checksum"])
    return {"ok": True, "size": written.size, "spans": written.spans, "crc": written.crc}


def serve(sock: socket.socket) -> None:
    """Answer frames until the parent closes the socket."""
    mapped: mmap.mmap | None = None
    slots: list[torch.Tensor] = []
    while (doc := recv_frame(sock)) is not None:
        if doc["op"] == "map":
            mapped, slots = _map(sock, doc, mapped)
            continue
        try:
            reply = _write(doc, slots)
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        send_frame(sock, reply)


def main() -> None:
    """Entry point: ``python -m perdure.runtime.checkpoint.writerchild <socket fd> <ppid>``."""
    fd, parent = int(sys.argv[1]), int(sys.argv[2])
    _die_with_parent(parent)
    lower_this_thread()  # it writes with what training leaves idle
    torch.set_num_threads(1)
    serve(socket.socket(fileno=fd))
    # Every write was answered after its file was closed (and fsynced when asked): nothing is
    # left to flush, and the interpreter's teardown with torch loaded is slow at this priority.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
