"""Preempting a script that has no preemption code: it only calls `ckpt.maybe_save` each step.

The notice (SIGTERM) makes the next maybe_save save on every rank at one agreed step and exit
suspended; the job is SUSPENDED, requeued, resumed from that save (not a periodic one: the
spec saves every 1000 steps, so a resume past step 0 can only come from the notice) and ends
bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.helpers.harness import Perdure

HERE = Path(__file__).resolve().parent


def spec(p: Perdure, name: str) -> Path:
    (p.root / f"out-{name}").mkdir()
    return p.spec(name, 2, ["python", str(HERE / "plain_job.py")],
                  # 0.1 s steps: the notice must land before the last step even when a CLI
                  # call takes seconds on a loaded machine (a primary that ends first succeeds)
                  env={"OUT": str(p.root / f"out-{name}"), "STEPS": "60", "STEP_TIME": "0.1"},
                  checkpoint={"dir": str(p.root / f"ckpt-{name}"), "every_steps": 1000})


def sha(p: Perdure, name: str) -> str:
    return str(json.loads((p.root / f"out-{name}" / "result.json").read_text())["sha256"])


@pytest.mark.timeout(300)
def test_a_script_without_preemption_code_suspends_resumes_and_ends_bit_identical(
        perdure: Perdure) -> None:
    cluster = perdure.cluster({"a": 2})
    r = perdure.cli("run", str(spec(perdure, "clean")), "--cluster", str(cluster), timeout=180,
                    check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    job = perdure.cli("submit", str(spec(perdure, "preempted")), "--cluster",
                      str(cluster)).stdout.strip()
    ctl = perdure.popen("controller", "--exit-when-idle", "--cluster", str(cluster))
    try:
        perdure.wait(job, lambda d: (d["step"] or 0) >= 15, timeout=120)
        perdure.cli("preempt", job)
        d = perdure.wait(job, lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=180)
        assert ctl.wait(timeout=60) == 0
    finally:
        if ctl.poll() is None:
            ctl.kill()
    assert d["state"] == "SUCCEEDED", d["events"][-10:]
    messages = [e["message"] for e in d["events"]]
    assert any(m.startswith("SUSPENDED") for m in messages), messages
    assert d["retries"] == {} and all(x["restarts"] == 0 for x in d["replicas"])
    log = (perdure.state / "logs" / job / "attempt-2" / "worker-1.out").read_text()
    resumed = {int(m) for m in re.findall(r"resumed at step (\d+)", log)}
    assert len(resumed) == 1 and 15 <= resumed.pop() < 60, log
    assert sha(perdure, "preempted") == sha(perdure, "clean")
