"""`perdure serve` against hostile clients: huge bodies, stale sessions, odd references."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
from serve_harness import Server, start_server, stop_server

from perdure.serve.limits import MAX_LOGIN_BYTES, MAX_SPEC_BYTES

MiB = 1 << 20


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    """A body sent chunked (no Content-Length), `size` bytes at a time."""
    for _ in range(total // size):
        yield b"a" * size


def test_bodies_are_refused_at_the_limit_however_they_come(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as anon, server.client() as c:
        r = anon.post("/login", content=chunks(MAX_LOGIN_BYTES * 4, 1024),
                      headers={"content-type": "application/x-www-form-urlencoded"})
        assert r.status_code == 413 and r.headers["connection"] == "close"
        r = c.post("/api/v1/jobs", content=chunks(MAX_SPEC_BYTES * 2),
                   headers={"content-type": "application/json"})
        assert r.status_code == 413 and f"over {MAX_SPEC_BYTES} bytes" in r.json()["detail"]
        r = c.post("/api/v1/nodes/a/restore", content=b"x" * 100_000)  # a declared length
        assert r.status_code == 413
        assert c.post("/api/v1/nodes/a/restore").status_code == 202  # the server goes on


def send_chunked(url: str, path: str, total: int) -> tuple[int, bytes]:
    """POST `total` bytes chunked over a raw socket until the server stops reading: the bytes
    sent, and what the server answered."""
    host, port = url.removeprefix("http://").split(":")
    sent, piece = 0, b"a" * MiB
    frame = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nTransfer-Encoding: chunked\r\n"
                  "Content-Type: application/x-www-form-urlencoded\r\n\r\n".encode())
        try:
            while sent < total:
                s.sendall(frame)
                sent += len(piece)
        except OSError:
            pass  # the server closed the connection: it stopped reading
        try:
            reply = s.recv(4096)
        except OSError:
            reply = b""
    return sent, reply


def test_a_huge_chunked_login_is_cut_off_without_growing_the_server(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        proc = psutil.Process(server.proc.pid)
        with server.client() as c:
            assert c.get("/api/v1/jobs").status_code == 200
        before, peak, done = proc.memory_info().rss, [0], threading.Event()

        def watch() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], proc.memory_info().rss)
                time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            sent, reply = send_chunked(server.url, "/login", 400 * MiB)
        finally:
            done.set()
            watcher.join()
        assert peak[0] - before < 40 * MiB, f"the server grew by {(peak[0] - before) >> 20} MiB"
        assert sent < 400 * MiB, "the server read the whole 400 MiB body"
        assert not reply or reply.startswith(b"HTTP/1.1 413"), reply[:200]
        with server.client() as c:
            assert c.get("/api/v1/jobs").status_code == 200
    finally:
        stop_server(server)


def test_logout_and_a_new_token_end_sessions_while_the_server_runs(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        same = {"x-perdure-csrf": "1", "origin": server.url, "sec-fetch-site": "same-origin"}
        with httpx.Client(base_url=server.url, timeout=30) as browser:
            assert browser.post("/login", data={"token": server.token}).status_code == 303
            cookie = browser.cookies["perdure_session"]
            assert browser.get("/api/v1/jobs").status_code == 200
            assert browser.post("/logout", headers=same).status_code == 303
        with httpx.Client(base_url=server.url, timeout=30,
                          cookies={"perdure_session": cookie}) as replay:
            assert replay.get("/api/v1/jobs").status_code == 401  # logged out for good

        with httpx.Client(base_url=server.url, timeout=30) as browser:
            assert browser.post("/login", data={"token": server.token}).status_code == 303
            assert browser.get("/api/v1/jobs").status_code == 200
            new = "fresh-token-" + "n" * 32
            staged = server.state_dir / "api-token.new"
            staged.write_text(new + "\n")
            staged.chmod(0o600)
            staged.replace(server.state_dir / "api-token")
            assert browser.get("/api/v1/jobs").status_code == 401  # every session ended
            with server.client() as old, server.client(token=new) as fresh:
                assert old.get("/api/v1/jobs").status_code == 401  # the old token too
                assert fresh.get("/api/v1/jobs").status_code == 200
    finally:
        stop_server(server)
