"""POST /api/v1/jobs makes the checks `perdure submit` makes: on Ray, a checkpoint dir on the
controller's disk only is refused with a 422 naming checkpoint.dir, and nothing is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from perdure.core.clusterspec import parse_cluster
from perdure.serve.app import create_app
from perdure.serve.auth import Auth
from perdure.serve.context import ServeContext

RAY = "backend: ray\nray: {address: '127.0.0.1:1', shared_dirs: [/mnt/shared]}\n"
JOB = "name: j\npools: [{name: w, command: [python, t.py]}]\n"


def post(tmp_path: Path, spec: str) -> tuple[int, dict[str, object], int]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    ctx = ServeContext(state, parse_cluster(RAY), Auth("t" * 40), tmp_path)
    with TestClient(create_app(ctx)) as c:
        r = c.post("/api/v1/jobs", content=spec, headers={
            "content-type": "application/yaml", "authorization": "Bearer " + "t" * 40})
        jobs = c.get("/api/v1/jobs", headers={"authorization": "Bearer " + "t" * 40}).json()
    return r.status_code, r.json(), len(jobs if isinstance(jobs, list) else jobs["jobs"])


def test_a_checkpoint_dir_only_the_controller_reads_is_refused(tmp_path: Path) -> None:
    status, body, stored = post(tmp_path, JOB)
    assert status == 422, body
    assert "checkpoint.dir" in str(body["message"]) and "shared_dirs" in str(body["message"])
    assert stored == 0


def test_a_url_is_accepted(tmp_path: Path) -> None:
    status, body, stored = post(tmp_path, JOB + "checkpoint: {dir: 's3://bucket/run'}\n")
    assert status == 201, body
    assert stored == 1
