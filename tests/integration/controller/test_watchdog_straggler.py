"""Stragglers on real processes: one replica on a slow node is named with its node within the
window, and with `stragglers: drain` its node is drained and it moves, keeping its identity,
resuming from the checkpoint it saved on the notice; in a synchronous DDP job, where every rank
reports the same step time, the slow rank is named from stack samples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from test_resume_harness import Settings, stop_leftovers, write_spec
from tests.helpers.harness import Perdure

HERE = Path(__file__).resolve().parent


@pytest.mark.timeout(180)
def test_a_replica_on_a_slow_node_is_named_and_moved(perdure: Perdure) -> None:
    spec = perdure.spec(
        "strag", 2, ["python", str(HERE / "straggle_job.py")],
        env={"SLOW_NODE": "b", "SLOW_STEP": "0.06", "FAST_STEP": "0.02",
             "STEPS_worker_0": "600", "STEPS_worker_1": "150"},
        checkpoint={"dir": str(perdure.root / "ckpt"), "every_steps": 1000},
        restart={"scope": "replica"}, watchdog={"stragglers": "drain"})
    cluster = perdure.cluster({"a": 1, "b": 1, "c": 1})
    r = perdure.cli("run", str(spec), "--cluster", str(cluster), timeout=150, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = perdure.describe("strag")
    found = [e["message"] for e in d["events"] if e["kind"] == "straggler"]
    assert len(found) == 1, found
    assert re.match(r"straggler: worker-1 on node b takes 0\.0\d+s per step over its last 50 "
                    r"steps, \d\.\dx the others' median 0\.02\d+s", found[0]), found
    assert "draining node b" in found[0]
    w1 = next(x for x in d["replicas"] if x["name"] == "worker-1")
    assert w1["node"] == "c" and w1["restarts"] == 0  # moved, not restarted: no failure
    log = (perdure.state / "logs" / d["id"] / "attempt-1" / "worker-1.out").read_text()
    resumed = re.findall(r"worker-1 on (\w): resumed at step (\d+)", log)
    assert resumed[0] == ("b", "0") and resumed[1][0] == "c" and int(resumed[1][1]) >= 50, log
    assert d["watchdog"]["stragglers"][0]["report"] == found[0]


@pytest.mark.local_long
@pytest.mark.timeout(180)
def test_a_slow_rank_of_a_synchronous_ddp_job_is_named_from_stack_samples(
        perdure: Perdure, monkeypatch: pytest.MonkeyPatch) -> None:
    """In DDP every rank reports the slowest's step time; stack samples tell them apart."""
    monkeypatch.setenv("PERDURE_STRAGGLER_SAMPLE_SECONDS", "0.2")
    s = Settings(epochs=3, samples=640, batch=16, replicas=2, every=1000, step_time=0.0)
    spec = write_spec(perdure, "sync", s)
    doc = yaml.safe_load(spec.read_text())
    doc["pools"][0]["command"][1] = str(HERE / "throttle_job.py")
    doc["pools"][0]["env"] = {"THROTTLE": "0.1", "THROTTLE_RANK": "1"}
    spec.write_text(yaml.safe_dump(doc))
    try:
        r = perdure.cli("run", str(spec), "--cluster", str(perdure.cluster({"a": 2})),
                        timeout=150, check=False)
    finally:
        stop_leftovers(perdure.state)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    found = [e["message"] for e in perdure.describe("sync")["events"]
             if e["kind"] == "straggler"]
    assert len(found) == 1 and found[0].startswith(
        "straggler: worker-1 on node a was outside any collective in "), found
