"""The relay: the network end of the runtime's transport, for replicas elsewhere.

It writes what it receives into the state dir in the file transport's layout, so readers see
the same files whichever transport delivered them. Each connection answers a fresh nonce with
HMAC(job secret, nonce, job, replica, launch) first; frames over 1 MiB are refused unread. A
restarted controller binds the port recorded in `<state>/relay.json`, so replicas find it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path
from typing import Any

from perdure import statedir
from perdure.backends.relay.kv import Stores
from perdure.backends.relay.ops import OPS, Peer, RelayFiles
from perdure.backends.relay.secrets import job_secret, state_secret
from perdure.core.events import Launch
from perdure.runtime.transport.base import (
    ENV_CONTROL_ADDR,
    ENV_JOB_SECRET,
    ENV_RDZV,
    ENV_TRANSPORT,
)
from perdure.runtime.transport.wire import MAX_FRAME, FrameError, mac, recv_frame, send_frame

log = logging.getLogger("perdure.relay")
HANDSHAKE_SECONDS = 5.0  # an unauthenticated connection gets this long to prove itself
IDLE_SECONDS = 900.0  # an authenticated connection idle this long is closed
MAX_CONNECTIONS = 2048
_HELLO_LIMIT = 4096
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,127}\Z")  # .match: no trailing newline
_BIND_RETRY_SECONDS = 5.0  # a previous controller's socket may still be closing


class RelayError(RuntimeError):
    """The relay cannot start (its recorded port is taken, the address is not this host's)."""


def _default_replicas(state_dir: Path) -> Callable[[str], Collection[str] | None]:
    """job id -> its replicas' names (from the store), None for an unknown job."""

    def replicas_of(job: str) -> Collection[str] | None:
        import sqlite3

        from perdure.core.replica import make_replicas
        from perdure.core.spec import JobSpec

        db = sqlite3.connect(f"file:{state_dir / statedir.DB}?mode=ro", uri=True, timeout=5)
        try:
            row = db.execute("SELECT spec FROM jobs WHERE id = ?", (job,)).fetchone()
        except sqlite3.Error:
            return None
        finally:
            db.close()
        if row is None:
            return None
        return frozenset(r.name for r in make_replicas(JobSpec.model_validate_json(row[0])))

    return replicas_of


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        relay = self.server.relay
        if not relay.admit(sock):
            with contextlib.suppress(OSError):
                send_frame(sock, {"ok": False, "error": "too many connections"})
            return
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(HANDSHAKE_SECONDS)
            peer = relay.authenticate(sock, self.client_address)
            if peer is None:
                return
            sock.settimeout(IDLE_SECONDS)
            while True:
                send_frame(sock, relay.answer(peer, recv_frame(sock, MAX_FRAME)))
        except (OSError, FrameError, ValueError) as exc:  # gone, idle, or not our protocol
            log.debug("relay: connection from %s closed: %s", self.client_address, exc)
        finally:
            relay.leave(sock)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True  # a restarted controller binds its port through TIME_WAIT
    request_queue_size = 128

    def __init__(self, address: tuple[str, int]) -> None:
        self.relay: Relay
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)


class Relay:
    """The relay of one state dir; use `Relay.start`."""

    def __init__(self, state_dir: Path, server: _Server, host: str,
                 secret_of: Callable[[str], str],
                 replicas_of: Callable[[str], Collection[str] | None]) -> None:
        self.state_dir = state_dir
        self._server = server
        server.relay = self
        self.host = host  # the address replicas are told
        self.port = int(server.server_address[1])
        self.secret_of = secret_of
        self._replicas_of = replicas_of
        self._names: dict[str, frozenset[str]] = {}
        self._unknown: dict[str, float] = {}  # job -> when it was last looked up in vain
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._closed = False
        self.files: RelayFiles = RelayFiles(state_dir)
        self.stores: Stores = Stores(state_dir)
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,),
                                        name="perdure-relay", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, state_dir: Path | str, host: str = "127.0.0.1", *,
              secret_of: Callable[[str], str] | None = None,
              replicas_of: Callable[[str], Collection[str] | None] | None = None) -> Relay:
        """Listen on `host` (the port recorded in relay.json, else a free one), record it;
        a job's secret and replica names come from the state dir unless given."""
        state = Path(state_dir)
        state.mkdir(parents=True, exist_ok=True)
        recorded = statedir.read_json(state / statedir.RELAY)
        port = int(recorded.get("port", 0)) if recorded else 0
        server = _bind(host, port, state)
        relay = cls(state, server, host, secret_of or partial(job_secret, state_secret(state)),
                    replicas_of or _default_replicas(state))
        statedir.write_atomically(state / statedir.RELAY, json.dumps({
            "host": relay.host, "bind": host, "port": relay.port, "pid": os.getpid(),
            "started": time.time()}), mode=0o666)
        log.info("relay listening on %s:%d", host, relay.port)
        return relay

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def launch_env(self, launch: Launch) -> dict[str, str]:
        """`launch.env` for a replica that reaches the controller through this relay."""
        env = dict(launch.env)
        elastic = env.pop("PERDURE_RDZV_DIR", None) is not None
        env.pop("PERDURE_REPORT_DIR", None)
        env[ENV_TRANSPORT] = "net"
        env[ENV_CONTROL_ADDR] = self.address
        if elastic:
            env[ENV_RDZV] = "1"
        if not env.get(ENV_JOB_SECRET):
            env[ENV_JOB_SECRET] = self.secret_of(launch.job_id)
        return env

    def close(self) -> None:
        """Stop listening and drop every connection (replicas retry until a relay is back)."""
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            self._closed = True
            open_now = list(self._connections)
        for sock in open_now:  # their handler threads then end
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.stores.close()

    def admit(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed or len(self._connections) >= MAX_CONNECTIONS:
                return False
            self._connections.add(sock)
            return True

    def leave(self, sock: socket.socket) -> None:
        with self._lock:
            self._connections.discard(sock)

    def names_of(self, job: str) -> frozenset[str] | None:
        names = self._names.get(job)
        if names is not None:
            return names
        now = time.monotonic()
        if now - self._unknown.get(job, -10.0) < 1.0:  # bound the lookups of unknown jobs
            return None
        found = self._replicas_of(job)
        if found is None:
            self._unknown[job] = now
            return None
        self._names[job] = frozenset(found)
        return self._names[job]

    def authenticate(self, sock: socket.socket, client: Any) -> Peer | None:
        """The handshake: a peer on success; None (after telling it why) otherwise."""
        nonce = secrets.token_hex(16)
        send_frame(sock, {"hello": "perdure-relay", "nonce": nonce})
        hello = recv_frame(sock, _HELLO_LIMIT)
        job, replica = str(hello.get("job", "")), str(hello.get("replica", ""))
        launch, proof = str(hello.get("launch", "")), str(hello.get("mac", ""))
        why = self._refusal(nonce, job, replica, launch, proof)
        if why is not None:
            log.warning("relay: refused %s (job %r, replica %r): %s", client, job[:64],
                        replica[:64], why)
            send_frame(sock, {"ok": False, "error": why})
            return None
        send_frame(sock, {"ok": True})
        return Peer(job, replica, launch)

    def _refusal(self, nonce: str, job: str, replica: str, launch: str,
                 proof: str) -> str | None:
        if not (_NAME.match(job) and _NAME.match(replica)):
            return "job and replica must be perdure names ([a-z0-9-])"
        names = self.names_of(job)
        if names is None:
            return f"no job {job} in this controller's state dir"
        expected = mac(self.secret_of(job), nonce, job, replica, launch)
        if not secrets.compare_digest(expected.encode(), proof.encode()):
            return "authentication failed: wrong job secret (PERDURE_JOB_SECRET)"
        if replica not in names:
            return f"{replica} is not a replica of job {job}"
        parts = launch.split(".")
        if len(parts) != 4 or parts[0] != job or parts[2] != replica or not (
                parts[1].isdigit() and parts[3].isdigit()):
            return f"launch id {launch[:100]!r} is not one of {replica} of job {job}"
        return None

    def answer(self, peer: Peer, request: dict[str, Any]) -> dict[str, Any]:
        """The reply to one request of an authenticated peer."""
        op = OPS.get(str(request.get("op")))
        if op is None:
            return {"ok": False, "error": f"unknown operation {str(request.get('op'))[:40]!r}"}
        try:
            return {"ok": True, "value": op(self, peer, request)}
        except (ValueError, KeyError, TypeError) as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}


def _bind(host: str, port: int, state: Path) -> _Server:
    deadline = time.monotonic() + _BIND_RETRY_SECONDS
    while True:
        try:
            return _Server((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                raise RelayError(f"cannot listen on {host}: not an address of this host "
                                 "(give the relay an address of one of its interfaces)") from None
            if exc.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                raise RelayError(
                    f"cannot listen on {host}:{port} ({exc.strerror}); the relay's port is "
                    f"recorded in {state / statedir.RELAY} so that running replicas find it again: "
                    "free that port, or delete the file if no replica of this state dir runs"
                ) from None
            time.sleep(0.1)
