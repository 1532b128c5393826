"""`transport: net` on the local backend: replicas reach the controller only through its relay,
and the job behaves as over files, through a controller crash and restart too."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import yaml
from tests.helpers.harness import Perdure, alive_replica_processes

STEPS = 60
# No torch: goodput and the error hook need only the standard library.
WORKER = f"""
import os, time
from perdure.runtime import goodput
for step in range(1, {STEPS} + 1):
    with goodput.step(step):
        time.sleep(0.05)
"""


def net_cluster(p: Perdure) -> Path:
    cluster = p.cluster({"a": 2})
    doc = yaml.safe_load(cluster.read_text())
    cluster.write_text(yaml.safe_dump({**doc, "transport": "net"}))
    return cluster


def progress(state: Path, job: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(state.glob(f"launches/{job}.*/progress.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines()]
    return out


def test_reports_made_while_the_controller_is_down_arrive_after_its_restart(
        perdure: Perdure) -> None:
    cluster = net_cluster(perdure)
    spec = perdure.spec("net", 1, ["python", "-c", WORKER])
    job = perdure.cli("submit", str(spec), "--cluster", str(cluster)).stdout.strip()
    ctl = perdure.popen("controller", "--cluster", str(cluster))
    try:
        perdure.wait(job, lambda d: any(r["kind"] == "steps" for r in progress(perdure.state, job)))
        port = json.loads((perdure.state / "relay.json").read_text())["port"]
        env = json.loads(next(perdure.state.glob(f"launches/{job}.*/launch.json")).read_text())
        assert env["env"]["PERDURE_TRANSPORT"] == "net"
        assert "PERDURE_REPORT_DIR" not in env["env"]  # nothing but the relay to report to
    finally:
        ctl.send_signal(signal.SIGKILL)
        ctl.wait()
    down_at = time.time()
    time.sleep(1.5)  # the replica steps on; its reports wait
    up_at = time.time()
    assert len(alive_replica_processes(perdure.state)) == 1
    again = perdure.cli("controller", "--exit-when-idle", timeout=120)
    assert again.returncode == 0, again.stdout
    d = perdure.describe(job)
    assert d["state"] == "SUCCEEDED", d
    assert json.loads((perdure.state / "relay.json").read_text())["port"] == port
    assert any("re-attached to 1 replica" in e["message"] for e in d["events"]), d["events"]
    steps = [r for r in progress(perdure.state, job) if r["kind"] == "steps"]
    covered = [n for r in steps for n in range(r["first"], r["last"] + 1)]
    assert covered == list(range(1, STEPS + 1))  # every step once, in order
    assert any(down_at < r["t"] < up_at for r in steps)  # made during the outage
    assert d["goodput"]["productive_seconds"] > 0


def test_an_uncaught_exception_reaches_the_controller_over_the_relay(perdure: Perdure) -> None:
    code = ("from perdure.runtime.errors import install_excepthook; install_excepthook(); "
            "raise ValueError('bad shape')")
    spec = perdure.spec("boom", 1, ["python", "-c", code])
    r = perdure.cli("run", str(spec), "--cluster", str(net_cluster(perdure)), check=False)
    assert r.returncode == 1, r.stdout
    d = perdure.describe("boom")
    assert d["error"]["code"] == "USER_CODE"
    assert d["error"]["message"].endswith("Termination reason: ValueError: bad shape.")
    error = json.loads(next(perdure.state.glob("launches/boom-*/error.json")).read_text())
    assert error["type"] == "ValueError" and "Traceback" in error["traceback"]
