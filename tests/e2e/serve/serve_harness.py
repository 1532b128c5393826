"""A real `perdure serve` process on 127.0.0.1 (ephemeral port) over a fresh state dir."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

PERDURE = [sys.executable, "-m", "perdure.cli.main"]
CLUSTER = "backend: local\nnodes: [{name: a, slots: 2}, {name: b, slots: 2}]\n"
# A replica that writes a numbered line to stderr every 0.1 s for up to a minute.
TICKER = ("import sys, time\nfor i in range(600):\n    print(f'tick {i}', file=sys.stderr, "
          "flush=True)\n    time.sleep(0.1)\n")


def spec(name: str, code: str = TICKER, replicas: int = 1, command: Path | None = None,
         **extra: Any) -> str:
    """A job spec (JSON) running `code` (or the script `command`) in each replica."""
    argv = ["python", str(command)] if command else ["python", "-c", code]
    body = {"name": name, "pools": [{"name": "worker", "replicas": replicas,
                                     "command": argv}], **extra}
    return json.dumps(body)


@dataclass
class Server:
    url: str
    token: str
    state_dir: Path
    proc: subprocess.Popen[str]

    def client(self, token: str | None = "default") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token if token == 'default' else token}"}
        return httpx.Client(base_url=self.url, headers=headers if token else {}, timeout=30)

    def submit(self, c: httpx.Client, body: str) -> str:
        r = c.post("/api/v1/jobs", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def wait_state(self, c: httpx.Client, job: str, states: set[str],
                   timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            d: dict[str, Any] = c.get(f"/api/v1/jobs/{job}").json()
            if d["state"] in states:
                return d
            assert time.monotonic() < deadline, f"{job} still {d['state']}, wanted {states}"
            time.sleep(0.05)


def start_server(tmp: Path, *args: str, cluster: str = CLUSTER) -> Server:
    state = tmp / "state"
    (tmp / "cluster.yaml").write_text(cluster)
    env = {**os.environ, "PERDURE_WARM_POOL": "0", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*PERDURE, "serve", "--port", "0", "--state-dir", str(state), "--cluster",
         str(tmp / "cluster.yaml"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
    if m is None:
        proc.kill()
        raise AssertionError(f"perdure serve did not start: {line}{proc.stdout.read()}")
    return Server(m.group(1), (state / "api-token").read_text().strip(), state, proc)


def stop_server(server: Server) -> str:
    server.proc.send_signal(signal.SIGTERM)
    try:
        out, _ = server.proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        out, _ = server.proc.communicate()
        raise AssertionError(f"perdure serve did not stop on SIGTERM: {out}") from None
    return out


def cancel_all(server: Server) -> None:
    """Cancel what is left and wait for it, so no replica outlives the test."""
    with server.client() as c:
        jobs = c.get("/api/v1/jobs", params={"limit": 500}).json()["jobs"]
        live = [j["id"] for j in jobs if j["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED")]
        for job in live:
            c.post(f"/api/v1/jobs/{job}/cancel")
        for job in live:
            server.wait_state(c, job, {"CANCELLED", "SUCCEEDED", "FAILED"})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(tmp_path_factory.mktemp("serve"))
    try:
        yield s
    finally:
        cancel_all(s)
        stop_server(s)
