"""The 4-replica DDP example (gloo) survives a replica SIGKILL mid-run."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.helpers.harness import Perdure

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ddp_mlp"


def max_step(state: Path) -> int:
    steps = [int(s) for log in state.glob("logs/*/attempt-1/worker-0.out")
             for s in re.findall(r"^step (\d+)", log.read_text(), re.M)]
    return max(steps, default=-1)


def test_ddp_example_recovers_from_a_killed_replica(perdure: Perdure) -> None:
    text = (EXAMPLE / "job.yaml").read_text()
    text = text.replace("[python, train.py", f"[python, {EXAMPLE}/train.py")
    spec = perdure.write("job.yaml", text)
    run = perdure.popen("run", str(spec), "--cluster", str(EXAMPLE / "cluster.yaml"))
    deadline = time.time() + 90
    while max_step(perdure.state) < 30 and time.time() < deadline:
        time.sleep(0.1)
    assert max_step(perdure.state) >= 30, "training never got going"
    perdure.cli("chaos", "kill", "ddp-mlp", "worker-2")
    out, _ = run.communicate(timeout=240)
    assert run.returncode == 0, out
    d = perdure.describe("ddp-mlp")
    assert d["state"] == "SUCCEEDED"
    # One group restart, charged to worker-2 even when a survivor's "connection closed by
    # peer" exit is seen first.
    assert [r["restarts"] for r in d["replicas"]] == [0, 0, 1, 0], d["events"]
    assert "restart 1 of 5" in out and "new round 1" not in out.split("SUCCEEDED")[-1]
    logs = perdure.cli("logs", "ddp-mlp", "--replica", "worker-2", "--stdout").stdout
    assert "restart 1" in logs and "done" in logs
