"""Preemption notices on real processes: suspend, hold, resume; node preemption; hot-swap."""

from __future__ import annotations

import time
from pathlib import Path

from tests.helpers.harness import Perdure

# Runs until told to stop; on the notice it "saves" (a marker file) and exits suspended.
SCRIPT = """
import os, sys, time, perdure
ctx = perdure.init(distributed=False)
marker = os.path.join(os.environ["MARKS"], f"{ctx.replica}-{ctx.attempt}")
open(marker + ".ready", "w").close()  # the notice handler is installed from here on
deadline = time.time() + float(os.environ.get("RUN_FOR", "600"))
while time.time() < deadline:
    if ctx.should_stop:
        open(marker, "w").write("saved")
        ctx.exit_suspended()
    time.sleep(0.05)
ctx.finish(0)
"""


def wait_ready(marks: Path, names: list[str], timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all((marks / f"{n}.ready").exists() for n in names):
            return
        time.sleep(0.1)
    raise AssertionError(f"replicas {names} never became ready")


def write_script(p: Perdure) -> str:
    path = p.root / "worker.py"
    path.write_text(SCRIPT)
    (p.root / "marks").mkdir(exist_ok=True)
    return str(path)


def test_preempt_hold_resume(perdure: Perdure) -> None:
    script = write_script(perdure)
    spec = perdure.spec("pre", 2, ["python", script],
                        env={"MARKS": str(perdure.root / "marks"), "RUN_FOR": "6"},
                        preemption={"grace_seconds": 10})
    job = perdure.cli("submit", str(spec)).stdout.strip()
    ctl = perdure.popen("controller")
    try:
        perdure.wait(job, lambda d: d["state"] == "RUNNING")
        wait_ready(perdure.root / "marks", ["worker-0-1", "worker-1-1"])
        began = time.time()
        perdure.cli("preempt", job, "--hold")
        d = perdure.wait(job, lambda d: d["state"] == "SUSPENDED", timeout=30)
        assert time.time() - began < 5  # the replicas saved and left at once
        assert sorted(p.name for p in (perdure.root / "marks").iterdir()
                      if not p.name.endswith(".ready")) == ["worker-0-1", "worker-1-1"]
        assert all(r["restarts"] == 0 for r in d["replicas"]) and d["retries"] == {}
        time.sleep(1.0)
        assert perdure.describe(job)["state"] == "SUSPENDED"  # held
        perdure.cli("resume", job)
        d = perdure.wait(job, lambda d: d["state"] == "SUCCEEDED", timeout=60)
        assert d["attempt"] == 2
        assert d["goodput"]["suspended_seconds"] >= 1.0
    finally:
        ctl.kill()
        ctl.wait()


def test_node_preemption_requeues_the_job_elsewhere(perdure: Perdure) -> None:
    script = write_script(perdure)
    cluster = perdure.cluster({"a": 2, "b": 2})
    spec = perdure.spec("spot", 2, ["python", script], env={"MARKS": str(perdure.root / "marks")})
    job = perdure.cli("submit", str(spec), "--cluster", str(cluster)).stdout.strip()
    ctl = perdure.popen("controller", "--cluster", str(cluster))
    try:
        d = perdure.wait(job, lambda d: d["state"] == "RUNNING")
        node = d["replicas"][0]["node"]
        perdure.cli("node", "preempt", node)
        d = perdure.wait(job, lambda d: d["state"] == "RUNNING" and d["attempt"] == 2,
                         timeout=60)
        assert all(r["node"] != node for r in d["replicas"])
        assert d["retries"] == {} and all(r["restarts"] == 0 for r in d["replicas"])
        assert any("SUSPENDED" in e["message"] for e in d["events"])
        perdure.cli("cancel", job)
        perdure.wait(job, lambda d: d["state"] == "CANCELLED", timeout=30)
    finally:
        ctl.kill()
        ctl.wait()


def test_hot_swap_takes_capacity_from_a_lower_priority_job(perdure: Perdure) -> None:
    script = write_script(perdure)
    cluster = perdure.cluster({"a": 2, "b": 2})
    (perdure.root / "marks-low").mkdir()
    high = perdure.cli("submit", str(perdure.spec("high", 2, ["python", script],
                                                  env={"MARKS": str(perdure.root / "marks")},
                                                  priority=10)),
                       "--cluster", str(cluster)).stdout.strip()
    ctl = perdure.popen("controller", "--cluster", str(cluster))
    try:
        d = perdure.wait(high, lambda d: d["state"] == "RUNNING")
        env = {"MARKS": str(perdure.root / "marks-low")}
        low = perdure.cli("submit", str(perdure.spec("low", 2, ["python", script], env=env,
                                                     priority=1))).stdout.strip()
        perdure.wait(low, lambda d: d["state"] == "RUNNING")
        wait_ready(perdure.root / "marks-low", ["worker-0-1", "worker-1-1"])
        node = d["replicas"][0]["node"]
        perdure.cli("chaos", "fail-node", node)
        d = perdure.wait(high, lambda d: d["state"] == "RUNNING"
                         and all(r["node"] not in (node, None) for r in d["replicas"]),
                         timeout=60)
        assert any(f"hot-swap: preempting {low}" in e["message"] for e in d["events"])
        # describe: the hot-swap as an elastic change, costing high the time to run again
        [swap] = [c for c in perdure.describe(high)["elastic"] if "hot-swap" in c["what"]]
        assert swap["cost"] == "until RUNNING again" and 0 < swap["cost_seconds"] < 60
        lo = perdure.wait(low, lambda d: d["state"] == "QUEUED", timeout=30)
        assert any(f"capacity goes to {high}" in e["message"] for e in lo["events"])
        [preempted] = [c for c in lo["elastic"] if "hot-swap" in c["what"]]
        assert preempted["what"].startswith(f"SUSPENDING: hot-swap: capacity goes to {high}")
        assert (perdure.root / "marks-low" / "worker-0-1").exists()  # low saved, then left
        assert not list((perdure.root / "marks").glob("*-1"))  # high was never preempted
        for j in (high, low):
            perdure.cli("cancel", j)
    finally:
        ctl.kill()
        ctl.wait()


def test_preempting_a_script_that_cannot_save_says_what_is_lost(perdure: Perdure) -> None:
    # No perdure runtime, nothing done on SIGTERM: the notice kills it and its work is lost.
    spec = perdure.spec("plain", 1, ["python", "-c", "import time; time.sleep(600)"])
    job = perdure.cli("submit", str(spec)).stdout.strip()
    ctl = perdure.popen("controller")
    try:
        perdure.wait(job, lambda d: d["state"] == "RUNNING")
        time.sleep(1.0)
        perdure.cli("preempt", job, "--hold")
        d = perdure.wait(job, lambda d: d["state"] == "SUSPENDED", timeout=30)
        lost = [e["message"] for e in d["events"] if "did not save" in e["message"]]
        assert len(lost) == 1, [e["message"] for e in d["events"]]
        assert lost[0].startswith("worker-0 exited 143 (SIGTERM) (preemption notice; it did "
                                  "not save: ")
        assert "s of work (steps unknown: the script reports none) since it started, with " \
               "no checkpoint is lost" in lost[0]
        assert float(lost[0].split("did not save: ")[1].split("s of work")[0]) >= 1.0
        perdure.cli("cancel", job)
        d = perdure.wait(job, lambda d: d["state"] == "CANCELLED")
        assert d["error"] == {"code": "CANCELLED", "message": "cancelled by user"}
    finally:
        ctl.kill()
        ctl.wait()
