"""The relay's wire: length-prefixed JSON frames and the per-job authentication handshake.

A frame is a 4-byte big-endian length and that many bytes of JSON (over MAX_FRAME: refused
before anything is allocated). The relay sends a nonce; the client answers with its job,
replica, launch and their HMAC under the job secret, and then speaks for that replica only.

Side effects: socket reads and writes only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import struct
from typing import Any

__all__ = ["MAX_FRAME", "FrameError", "mac", "parse_addr", "recv_exact", "recv_frame", "recv_into",
           "send_frame"]

MAX_FRAME = 1 << 20  # bytes; progress batches are split to fit, error records are clipped
PROTOCOL = "perdure-relay/1"
_LEN = struct.Struct(">I")


class FrameError(ConnectionError):
    """The peer sent something that is not a frame of this protocol (or too big)."""


def mac(secret: str, nonce: str, job: str, replica: str, launch: str) -> str:
    """The handshake's proof that the client knows the job's secret. No side effects."""
    msg = "\0".join((PROTOCOL, nonce, job, replica, launch)).encode()
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()


def recv_into(sock: socket.socket, view: memoryview) -> None:
    """Fill `view` from `sock`; ConnectionError when the peer closes first."""
    view = view.cast("B")
    got = 0
    while got < view.nbytes:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError(f"connection closed after {got} of {view.nbytes} bytes")
        got += k


def recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)  # filled in place: a snapshot is received without an extra copy
    recv_into(sock, memoryview(buf))
    return buf


def send_frame(sock: socket.socket, doc: dict[str, Any]) -> None:
    body = json.dumps(doc, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:  # a caller's bug, not the network's: never retried
        raise ValueError(f"a frame of {len(body)} bytes is over the {MAX_FRAME}-byte limit")
    sock.sendall(_LEN.pack(len(body)) + body)


def recv_frame(sock: socket.socket, limit: int = MAX_FRAME) -> dict[str, Any]:
    """One frame as a JSON object; FrameError when it is over `limit` or not an object."""
    (n,) = _LEN.unpack(recv_exact(sock, _LEN.size))
    if n > limit:  # checked before the body is read or allocated
        raise FrameError(f"a frame of {n} bytes is over the {limit}-byte limit")
    try:
        doc = json.loads(recv_exact(sock, n))
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[..." past the limit
        raise FrameError(f"a frame is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise FrameError("a frame is not a JSON object")
    return doc


def parse_addr(addr: str, what: str = "PERDURE_CONTROL_ADDR") -> tuple[str, int]:
    """`host:port` (or `[v6]:port`) as a tuple; ValueError naming `what` when malformed."""
    host, sep, port = addr.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what}={addr!r} is not host:port (e.g. 10.0.0.1:7001)")
    return host, int(port)
