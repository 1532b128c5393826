"""A hung DDP job: found within hang_seconds, its stacks captured, the laggard named, the group
restarted from its checkpoint, and the run still ends bit-identical to an uninterrupted one.

Real processes: the ddp_mlp example on gloo, 2 ranks; rank 1 sleeps inside
`stuck_in_data_pipeline` at step 25 of the first round while rank 0 waits in DDP's all-reduce.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from test_resume_harness import Settings, read_result, run_clean, stop_leftovers, write_spec
from tests.helpers.harness import Perdure

HERE = Path(__file__).resolve().parent
SETTINGS = Settings(epochs=2, samples=640, batch=16, replicas=2, every=10, step_time=0.02)
HANG_SECONDS = 3.0


def last_progress(state: Path, job_id: str, before: float) -> float:
    """When any rank of the first round last reported progress before `before` (the runtime's
    own records; the steps still buffered when it was stopped are flushed after)."""
    times = [json.loads(line)["t"] for f in (state / "launches").glob(f"{job_id}.1.*.1")
             for line in (f / "progress.jsonl").read_text().splitlines()]
    return max(t for t in times if t < before)


@pytest.mark.timeout(300)
def test_hung_rank_is_named_its_stacks_kept_and_the_job_resumes_bit_identical(
        perdure: Perdure) -> None:
    cluster = perdure.cluster({"a": 2})
    try:
        clean = run_clean(perdure, SETTINGS, cluster)
        spec_path = write_spec(perdure, "hung", SETTINGS,
                               watchdog={"hang_seconds": HANG_SECONDS})
        spec = yaml.safe_load(spec_path.read_text())
        pool = spec["pools"][0]
        pool["command"][1] = str(HERE / "hang_job.py")
        pool["env"] = {"HANG_STEP": "25", "HANG_RANK": "1"}
        spec_path.write_text(yaml.safe_dump(spec))
        began = time.time()
        r = perdure.cli("run", str(spec_path), "--cluster", str(cluster), check=False,
                        timeout=240)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    finally:
        stop_leftovers(perdure.state)
    d = perdure.describe("hung")
    events = d["events"]
    hang = next(e for e in events if e["kind"] == "watchdog")
    # named: rank 1 (worker-1) was outside the collective, in the function it slept in
    assert hang["message"].startswith("HANG: worker-1 blamed (outside the collective"), hang
    assert "stuck_in_data_pipeline" in hang["message"]
    assert re.search(r"worker-0 step \d+: in a collective", hang["message"]), hang
    # detected within hang_seconds + a few seconds of the stall (the last progress reported)
    stalled = hang["time"] - last_progress(perdure.state, d["id"], hang["time"])
    assert HANG_SECONDS <= stalled < HANG_SECONDS + 3
    restart = next(e for e in events if e["kind"] == "decision" and "hung" in e["message"])
    assert restart["message"].startswith("restart worker-1 hung: hang, restart 1 of"), restart
    assert {x["name"]: x["restarts"] for x in d["replicas"]} == {"worker-0": 0, "worker-1": 1}
    stacks = (perdure.state / "logs" / d["id"] / "attempt-1" / "worker-1.stacks").read_text()
    assert "stuck_in_data_pipeline" in stacks and "MainThread" in stacks
    assert "_engine_run_backward" in (
        perdure.state / "logs" / d["id"] / "attempt-1" / "worker-0.stacks").read_text()
    # resumed from its checkpoint (step 20), not from scratch, and bit-identical
    log = (perdure.state / "logs" / d["id"] / "attempt-1" / "worker-0.out").read_text()
    # from the step-20 checkpoint, or a newer node-local snapshot (taken before the hang)
    resumed = re.search(r"resumed from step (\d+)", log)
    assert resumed is not None and 20 <= int(resumed.group(1)) < 25, log[-2000:]
    result = read_result(perdure.root / "ckpt-hung" / "result.json")
    assert result.sha256 == clean.sha256
    assert result.consumed == clean.consumed
    assert time.time() - began < 120
