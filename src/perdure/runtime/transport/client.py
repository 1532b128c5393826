"""A replica's connections to the controller's relay: authenticated, retried, pooled.

An unreachable relay is retried with backoff until the call's deadline (TransportError); a
refusal raises at once. Requests carry the client's token and a sequence number, so the relay
can tell a retried non-idempotent request (a store `add`) from a new one.

Side effects: TCP connections to the relay.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import socket
import threading
import time
from typing import Any

from perdure.runtime.transport.base import TransportError
from perdure.runtime.transport.wire import FrameError, mac, recv_frame, send_frame

__all__ = ["Refused", "RelayClient"]

_BACKOFF_FIRST, _BACKOFF_MAX = 0.05, 1.0
_MAX_IDLE = 4  # pooled connections kept per process


class Refused(TransportError):
    """The relay answered and said no (authentication, or a request it does not allow)."""


class RelayClient:
    """Requests to the relay at `host:port` as `replica` of `job`, launch `launch`."""

    def __init__(self, host: str, port: int, *, job: str, replica: str, launch: str,
                 secret: str, connect_timeout: float = 2.0) -> None:
        self.host, self.port = host, port
        self.job, self.replica, self.launch = job, replica, launch
        self._secret = secret
        self.connect_timeout = connect_timeout
        self.token = secrets.token_hex(8)  # this process, for the relay's de-duplication
        self._ids = itertools.count(1)
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _connect(self, timeout: float) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = recv_frame(sock)
            nonce = str(hello.get("nonce", ""))
            send_frame(sock, {"job": self.job, "replica": self.replica, "launch": self.launch,
                              "mac": mac(self._secret, nonce, self.job, self.replica,
                                         self.launch)})
            answer = recv_frame(sock)
        except BaseException:
            sock.close()
            raise
        if not answer.get("ok"):
            sock.close()
            raise Refused(f"the relay at {self.host}:{self.port} refused {self.replica} of "
                          f"{self.job}: {answer.get('error', 'no reason given')}")
        return sock

    def _take(self, timeout: float) -> socket.socket:
        with self._lock:
            if os.getpid() != self._pid:  # a forked child must not share the parent's sockets
                self._idle, self._pid = [], os.getpid()
            if self._idle:
                return self._idle.pop()
        return self._connect(timeout)

    def _give_back(self, sock: socket.socket) -> None:
        with self._lock:
            if len(self._idle) < _MAX_IDLE and os.getpid() == self._pid:
                self._idle.append(sock)
                return
        sock.close()

    def call(self, op: str, args: dict[str, Any] | None = None, *, deadline: float,
             reply_timeout: float = 10.0) -> Any:
        """The `value` of the relay's answer to `op`, retried until `deadline` (monotonic):
        else TransportError; a refusal raises Refused at once."""
        request = {"op": op, "c": self.token, "i": next(self._ids), **(args or {})}
        delay, last = _BACKOFF_FIRST, "no attempt made"
        while True:
            remaining = deadline - time.monotonic()
            try:
                sock = self._take(max(0.05, min(self.connect_timeout, remaining)))
                try:
                    sock.settimeout(reply_timeout)
                    send_frame(sock, request)
                    reply = recv_frame(sock)
                except BaseException:
                    sock.close()
                    raise
                self._give_back(sock)
            except Refused:
                raise
            except (OSError, FrameError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if reply.get("ok"):
                    return reply.get("value")
                raise Refused(f"the relay at {self.host}:{self.port} refused {op}: "
                              f"{reply.get('error', 'no reason given')}")
            if time.monotonic() + delay > deadline:
                raise TransportError(
                    f"the controller's relay at {self.host}:{self.port} did not answer {op} "
                    f"in time ({last}); is the controller running?")
            time.sleep(delay)
            delay = min(_BACKOFF_MAX, delay * 2)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            with contextlib.suppress(OSError):
                sock.close()
