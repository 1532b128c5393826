"""A 2-replica DDP job checkpointing to s3:// (a real S3 server behind a fault proxy), driven
through `perdure serve`: while the store throttles every upload, saves fail, training goes on
and the job says so loudly (events, the API's describe, the metric); once the store is back
the next save commits and the job succeeds. Afterwards no credential is anywhere perdure
writes or shows: logs, events, describe, the API, the metrics or the k8s export."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_harness import PERDURE, Server, cancel_all, start_server, stop_server
from tests.helpers.s3server import S3

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.s3_long  # ~25 s unloaded: outside the default suite (make test-s3)
TRAIN = ROOT / "examples" / "ddp_mlp" / "train.py"


def _spec(s3: S3, out: Path) -> str:
    argv = ["python", str(TRAIN), "--epochs", "1", "--samples", "640", "--batch", "16",
            "--checkpoint-every", "1", "--step-time", "0.25", "--snapshot-every", "0",
            "--keep", "2", "--out", str(out), "--log-every", "5"]
    return json.dumps({"name": "s3-ddp", "pools": [{"name": "worker", "replicas": 2,
                                                     "command": argv}],
                       "checkpoint": {"dir": s3.url("runs/ddp")},
                       "env": {"PERDURE_CHECKPOINT_ALERT_AFTER": "2",
                               "PERDURE_S3_PART_MB": "5"}})


def _until(c: httpx.Client, job: str, ok: Any, what: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        d = c.get(f"/api/v1/jobs/{job}").json()
        if ok(d):
            return d
        assert d["state"] not in ("FAILED", "CANCELLED"), d
        assert time.monotonic() < deadline, f"{what}: {json.dumps(d)[-3000:]}"
        time.sleep(0.2)


def _metric(c: httpx.Client, job: str) -> float | None:
    for line in c.get("/metrics").text.splitlines():
        if line.startswith(f'perdure_checkpoint_failed_saves{{job="{job}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_failing_saves_to_s3_are_loud_training_goes_on_and_no_credential_leaks(
    s3: S3, tmp_path: Path,
) -> None:
    server = start_server(tmp_path)
    try:
        with server.client() as c:
            s3.proxy.fail("503", times=None, method="PUT")  # every upload throttled
            job = server.submit(c, _spec(s3, tmp_path / "out"))
            d = _until(c, job, lambda d: d["checkpoint"]["alert"], "no checkpoint alert")
            assert d["state"] == "RUNNING" and d["checkpoint"]["failed_saves"] >= 2
            assert "SlowDown" in d["checkpoint"]["last_error"]
            assert (_metric(c, job) or 0) >= 2
            s3.proxy.clear()
            d = _until(c, job, lambda d: d["state"] == "SUCCEEDED", "did not succeed")
            kinds = [e["kind"] for e in d["events"]]
            assert "checkpoint-alert" in kinds
            assert any(e["message"].startswith("checkpoint saves work again")
                       for e in d["events"]), d["events"]
            assert d["checkpoint"]["failed_saves"] == 0 and _metric(c, job) == 0
            shown = _everything_shown(server, c, job, tmp_path)
    finally:
        cancel_all(server)
        shown_serve = stop_server(server)
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"):
        secret = s3.env[name]
        for where, text in [*shown, ("serve output", shown_serve)]:
            assert secret not in text, f"{name} appears in {where}"


def _everything_shown(server: Server, c: httpx.Client, job: str,
                      tmp: Path) -> list[tuple[str, str]]:
    """Every text perdure shows or writes about the job, with where it comes from."""
    shown = [(f"API {path}", c.get(path).text) for path in (
        f"/api/v1/jobs/{job}", f"/api/v1/jobs/{job}/timeline", "/api/v1/jobs", "/metrics",
        f"/api/v1/jobs/{job}/logs/worker-0?stream=stderr",
        f"/api/v1/jobs/{job}/logs/worker-1?stream=stderr")]
    cli = [*PERDURE, "--state-dir", str(server.state_dir)]
    for args in (["describe", job], ["describe", job, "--json"], ["logs", job, "worker-0"]):
        done = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=60)
        shown.append((" ".join(args), done.stdout + done.stderr))
    for path in server.state_dir.rglob("*"):
        if path.is_file():
            shown.append((str(path), path.read_bytes().decode("utf-8", "replace")))
    # A spec that names a credential: the export reads it from a Secret, never writes it.
    spec = tmp / "export.yaml"
    d = json.loads(_spec_for_export(job))
    spec.write_text(json.dumps(d))
    done = subprocess.run([*PERDURE, "export", "k8s", str(spec), "--image", "img:1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "secretKeyRef" in done.stdout and "s3-ddp-credentials" in done.stdout
    shown.append(("k8s export", done.stdout + done.stderr))
    return shown


def _spec_for_export(job: str) -> str:
    import os

    return json.dumps({"name": "s3-ddp", "pools": [{"name": "worker", "replicas": 2,
                                                     "command": ["python", "train.py"]}],
                       "checkpoint": {"dir": "s3://bucket/runs/ddp"},
                       "env": {"AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
                               "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"]}})
