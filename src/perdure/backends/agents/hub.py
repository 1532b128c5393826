"""The controller's end of the node agents' connections.

An agent proves it knows the state dir's secret (a nonce, HMAC over it, the allocation and the
node), then pushes its reports; the controller sends launches, stops and port requests back.
A restarted controller binds the port recorded in hub.json, so the agents find it again.

Side effects: a listening socket, a thread per connection, hub.json.
"""

from __future__ import annotations

import contextlib
import hmac
import itertools
import os
import queue
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from perdure import statedir
from perdure.backends.agents.nodedir import AGENT_ROLE
from perdure.runtime.transport.wire import FrameError, mac, recv_frame, send_frame

HANDSHAKE_SECONDS = 5.0
BIND_RETRY_SECONDS = 5.0  # a previous controller's socket may still be closing


def load_secret(directory: str) -> str:
    path = os.path.join(directory, statedir.SLURM_SECRET)
    record = statedir.read_json(path)
    if record is None:
        record = {"secret": secrets.token_hex(32)}
        statedir.write_json(path, record)
    return str(record["secret"])


@dataclass
class Agent:

    alloc: str
    node: str
    address: str
    sock: socket.socket
    last_seen: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, doc: dict[str, Any]) -> bool:
        try:
            with self.lock:
                send_frame(self.sock, doc)
            return True
        except OSError:
            return False


class Hub:
    """Accepts agents; their frames land on `events` (a frame None: the connection ended)."""

    def __init__(self, directory: str, host: str, secret: str) -> None:
        self.directory = directory
        self.secret = secret
        self.events: queue.Queue[tuple[Agent, dict[str, Any] | None]] = queue.Queue()
        self._replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._sock = self._bind(host)
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        statedir.write_json(os.path.join(directory, statedir.HUB), {"address": self.address})
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="slurm-hub").start()

    def _bind(self, host: str) -> socket.socket:
        record = statedir.read_json(os.path.join(self.directory, statedir.HUB)) or {}
        port = 0
        if str(record.get("address", "")).startswith(host + ":"):
            port = int(str(record["address"]).rsplit(":", 1)[1])
        deadline = time.monotonic() + BIND_RETRY_SECONDS
        while True:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
                sock.listen(64)
                return sock
            except OSError:
                sock.close()
                if time.monotonic() >= deadline:
                    if port == 0:
                        raise
                    port = 0  # taken by someone else: the old agents are lost anyway
                    continue
                time.sleep(0.2)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        agent = self._handshake(conn)
        if agent is None:
            with contextlib.suppress(OSError):
                conn.close()
            return
        self.events.put((agent, {"t": "hello", "address": agent.address}))
        try:
            while True:
                frame = recv_frame(conn)
                agent.last_seen = time.monotonic()
                rid = frame.get("rid")
                if isinstance(rid, int) and rid in self._replies:
                    self._replies[rid].put(frame)
                else:
                    self.events.put((agent, frame))
        except (OSError, FrameError):
            pass
        with contextlib.suppress(OSError):
            conn.close()
        self.events.put((agent, None))

    def _handshake(self, conn: socket.socket) -> Agent | None:
        conn.settimeout(HANDSHAKE_SECONDS)
        nonce = secrets.token_hex(16)
        try:
            send_frame(conn, {"nonce": nonce})
            hello = recv_frame(conn, limit=4096)
        except (OSError, FrameError):
            return None
        alloc, node = str(hello.get("alloc", "")), str(hello.get("node", ""))
        want = mac(self.secret, nonce, alloc, node, AGENT_ROLE)
        if not hmac.compare_digest(want, str(hello.get("mac", ""))):
            with contextlib.suppress(OSError):
                send_frame(conn, {"error": "authentication failed"})
            return None
        conn.settimeout(None)
        with contextlib.suppress(OSError):
            send_frame(conn, {"ok": True})
        return Agent(alloc, node, str(hello.get("address", "")), conn)

    def request(self, agent: Agent, doc: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Send `doc` and wait up to `timeout` s for the agent's answer to it (None: none)."""
        rid = next(self._ids)
        box: queue.Queue[dict[str, Any]] = queue.Queue()
        self._replies[rid] = box
        try:
            if not agent.send({**doc, "rid": rid}):
                return None
            return box.get(timeout=timeout)
        except queue.Empty:
            return None
        finally:
            self._replies.pop(rid, None)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.close()
