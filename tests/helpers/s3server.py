"""A real S3 API server for tests (moto's standalone server) and a fault-injecting proxy.

The server runs from its own virtual environment, `.venv-moto` at the repository root
(`make moto-venv`; created here on first use if missing): installing moto next to s3fs breaks
botocore's pin. Both listen on 127.0.0.1 only, on free ports.

The proxy forwards one HTTP request per connection to the server and can instead answer 500 or
503 SlowDown, drop the connection before or in the middle of the answer, flip a byte of the
request body (moto, unlike AWS, does not check the request's checksum), or kill the server
(a rule per request, matched on method and path), so tests see the faults an object store
really has, through the same client code users run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MOTO_VENV = Path(os.environ.get("PERDURE_MOTO_VENV") or ROOT / ".venv-moto")
MOTO_PIN = "moto[server]==5.2.5"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def moto_python() -> Path:
    """The moto environment's interpreter, creating the environment if it is missing (skips
    the test, saying why, when the package index cannot be reached)."""
    python = MOTO_VENV / "bin" / "python"
    if python.exists() and _has_moto(python):
        return python
    lock = Path("/tmp/perdure-moto-venv.lock")
    with open(lock, "w") as held:
        import fcntl

        fcntl.flock(held, fcntl.LOCK_EX)
        if python.exists() and _has_moto(python):
            return python
        base = getattr(sys, "_base_executable", sys.executable)
        made = subprocess.run([base, "-m", "venv", str(MOTO_VENV)], capture_output=True,
                              text=True)
        if made.returncode == 0:
            made = subprocess.run([str(python), "-m", "pip", "install", "-q", MOTO_PIN],
                                  capture_output=True, text=True, timeout=600)
        if made.returncode != 0 or not _has_moto(python):
            pytest.skip(f"no S3 test server: could not install {MOTO_PIN} into {MOTO_VENV} "
                        f"(is the package index reachable? `make moto-venv`): "
                        f"{made.stderr.strip()[-300:]}")
    return python


def _has_moto(python: Path) -> bool:
    return subprocess.run([str(python), "-c", "import moto.server"],
                          capture_output=True).returncode == 0


class MotoServer:
    """moto's S3 server on 127.0.0.1:port; `kill` and `start` again keep the port (and, moto
    being in memory, lose every bucket)."""

    def __init__(self, log: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        python = moto_python()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(python), "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto exited {self.proc.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).close()
                return
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"moto did not answer on {self.endpoint} within {timeout}s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None


@dataclass
class Rule:
    """A fault for requests that match: kind is 500, 503, drop, cut, corrupt or kill."""

    kind: str
    times: int | None  # None: every matching request until cleared
    method: str | None = None
    path: str | None = None  # a substring of the request target

    def matches(self, method: str, target: str) -> bool:
        return ((self.method is None or self.method == method)
                and (self.path is None or self.path in target))


_ANSWERS = {
    "503": (b"503 Slow Down", b"SlowDown", b"Please reduce your request rate."),
    "500": (b"500 Internal Server Error", b"InternalError", b"We encountered an internal error."),
}


@dataclass
class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of the server, with fault rules."""

    upstream: int
    on_kill: Callable[[], None] | None = None
    rules: list[Rule] = field(default_factory=list)
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # method, target, outcome
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = int(self.sock.getsockname()[1])
        self._stop = False
        threading.Thread(target=self._serve, name="fault-proxy", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail(self, kind: str, times: int | None = 1, method: str | None = None,
             path: str | None = None) -> None:
        assert kind in ("500", "503", "drop", "cut", "corrupt", "kill"), kind
        with self.lock:
            self.rules.append(Rule(kind, times, method, path))

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()

    def faults(self) -> list[str]:
        with self.lock:
            return [o for _, _, o in self.seen if o != "pass"]

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            self.sock.close()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _rule(self, method: str, target: str) -> str:
        with self.lock:
            for rule in self.rules:
                if rule.matches(method, target) and rule.times != 0:
                    if rule.times is not None:
                        rule.times -= 1
                    self.seen.append((method, target, rule.kind))
                    return rule.kind
            self.seen.append((method, target, "pass"))
        return "pass"

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(120)
            try:
                head, body = _read_request(conn)
            except (OSError, ValueError):
                return
            if head is None:
                return
            method, target = head.split(b" ", 2)[:2]
            kind = self._rule(method.decode(), target.decode())
            if kind == "drop":
                return
            if kind in _ANSWERS:
                conn.sendall(_error_answer(*_ANSWERS[kind]))
                return
            if kind == "kill" and self.on_kill is not None:
                self.on_kill()
            if kind == "corrupt" and body:  # a flipped byte the server stores as sent
                body = body[:len(body) // 2] + bytes([body[len(body) // 2] ^ 0xFF]) + \
                    body[len(body) // 2 + 1:]
            answer = _forward(self.upstream, head, body)
            if answer is None:
                return  # the server is gone: the connection drops, as it would
            if kind == "cut":
                answer = answer[: max(1, len(answer) // 2)]
            with contextlib.suppress(OSError):
                conn.sendall(answer)


def _read_request(conn: socket.socket) -> tuple[bytes | None, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(b":") for line in head.split(b"\r\n")[1:])}
    length = int(headers.get(b"content-length", b"0"))
    if headers.get(b"expect", b"").lower() == b"100-continue" and len(body) < length:
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        while not body.endswith(b"0\r\n\r\n"):
            chunk = conn.recv(1 << 20)
            if not chunk:
                raise ValueError("request body cut short")
            body += chunk
    while len(body) < length:
        chunk = conn.recv(min(1 << 20, length - len(body)))
        if not chunk:
            raise ValueError("request body cut short")
        body += chunk
    return head, body


def _forward(port: int, head: bytes, body: bytes) -> bytes | None:
    lines = [ln for ln in head.split(b"\r\n")
             if not ln.lower().startswith((b"connection:", b"expect:"))]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=120) as up:
            up.sendall(b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body)
            parts = []
            while chunk := up.recv(1 << 20):
                parts.append(chunk)
    except OSError:
        return None
    answer = b"".join(parts)
    rhead, sep, rbody = answer.partition(b"\r\n\r\n")
    rlines = [ln for ln in rhead.split(b"\r\n") if not ln.lower().startswith(b"connection:")]
    return b"\r\n".join([*rlines, b"Connection: close"]) + sep + rbody


def _error_answer(status: bytes, code: bytes, message: bytes) -> bytes:
    body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>' + code + b"</Code><Message>"
            + message + b"</Message><RequestId>perdure-fault</RequestId></Error>")
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: application/xml\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)


def make_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` through the server's S3 API (anonymous requests work on moto)."""
    req = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
    urllib.request.urlopen(req, timeout=30).close()


@dataclass
class S3:
    """A bucket on a real S3 API server, reached through a fault proxy by the AWS env chain."""

    server: MotoServer
    proxy: FaultProxy
    bucket: str
    env: dict[str, str]

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"
