"""`perdure serve` against hostile clients: huge bodies, stale sessions, odd references."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
from serve_harness import Server, spec, start_server, stop_server

from perdure.serve.limits import MAX_LOGIN_BYTES, MAX_SPEC_BYTES

MiB = 1 << 20
QUICK = "print('done')"


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


def test_odd_job_references_are_400_or_409_listing_candidates(server: Server) -> None:
    with server.client() as c:
        a = server.submit(c, spec("refa", QUICK))
        b = server.submit(c, spec("refb", QUICK))
        for path in ("/api/v1/jobs/%20", "/api/v1/jobs/%1F", "/api/v1/jobs/%20/cancel"):
            r = c.request("POST" if path.endswith("cancel") else "GET", path)
            assert r.status_code == 400, (path, r.status_code, r.text)
            assert "empty job reference" in r.json()["detail"]["message"]
        for method, path in (("GET", "/api/v1/jobs/ref"), ("POST", "/api/v1/jobs/ref/cancel"),
                             ("GET", "/api/v1/jobs/ref/events")):
            r = c.request(method, path)
            assert r.status_code == 409, (path, r.status_code, r.text)
            assert set(r.json()["detail"]["candidates"]) == {a, b}
        server.wait_state(c, a, {"SUCCEEDED"})
        for kind, past in (("cancel", "cancelled"), ("preempt", "preempted"),
                           ("resume", "resumed")):
            r = c.post(f"/api/v1/jobs/{a}/{kind}")
            assert r.status_code == 409, (kind, r.status_code)
            assert f"SUCCEEDED: a finished job cannot be {past}" in r.json()["detail"]
        stream = {"accept": "text/event-stream"}
        for bad in ("²".encode("latin-1"), b"-1", b"9" * 30):  # a non-ASCII digit, a sign, huge
            r = c.get(f"/api/v1/jobs/{a}/events", headers={**stream, "last-event-id": bad})
            assert r.status_code == 400 and "Last-Event-ID" in r.json()["detail"]
            r = c.get(f"/api/v1/jobs/{a}/logs", headers={**stream, "last-event-id": bad})
            assert r.status_code == 400
        with c.stream("GET", f"/api/v1/jobs/{a}/events",
                      headers={**stream, "last-event-id": "0"}) as ok:
            assert ok.status_code == 200


def test_search_is_literal(server: Server) -> None:
    with server.client() as c:
        server.submit(c, spec("literal-search", QUICK))
        for q in ("\x00", "%", "_", "\x00literal", "\x1f"):
            page = c.get("/api/v1/jobs", params={"q": q}).json()
            assert page["total"] == 0 and page["jobs"] == [], q
        assert c.get("/api/v1/jobs", params={"q": "LITERAL-sea"}).json()["total"] == 1


def test_stopping_with_open_streams_prints_no_traceback(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--no-controller")  # the job stays QUEUED: streams stay open
    with server.client() as c:
        job = server.submit(c, spec("streamed"))
    opened = threading.Barrier(3, timeout=30)

    def follow(path: str) -> None:
        headers = {"Authorization": f"Bearer {server.token}", "accept": "text/event-stream"}
        with httpx.stream("GET", server.url + path, headers=headers, timeout=60) as r:
            first = True
            for _ in r.iter_bytes():
                if first:
                    opened.wait()
                    first = False

    streams = [threading.Thread(target=follow, args=(f"/api/v1/jobs/{job}/{what}",))
               for what in ("events", "logs")]
    for t in streams:
        t.start()
    opened.wait()
    server.proc.send_signal(signal.SIGINT)
    out, _ = server.proc.communicate(timeout=30)
    for t in streams:
        t.join(timeout=30)
        assert not t.is_alive()
    assert server.proc.returncode == 0, out
    assert "Traceback" not in out and "Exception in ASGI" not in out, out
