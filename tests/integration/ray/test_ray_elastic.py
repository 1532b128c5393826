"""Elastic resize on Ray: a host dies -> the job shrinks; it comes back -> the job grows.

The survivors keep their processes (one launch, one PID each) throughout; every runtime
contract (rounds, barriers, the store, holders) goes through the controller's relay.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from raytest import RayPerdure
from tests.helpers.clusterjobs import describe

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "elastic_mlp"


def worlds(p: RayPerdure, replica: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for log in p.state.glob(f"logs/*/attempt-1/{replica}.out"):
        out += [(int(s), int(w)) for s, w in re.findall(r"^step (\d+) world (\d+)",
                                                          log.read_text(), re.M)]
    return out


def wait_for(what: str, pred: object, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def pids(p: RayPerdure, replica: str) -> list[int]:
    """The PID of each launch of `replica` that started (as mirrored to the state dir)."""
    return [int(json.loads((d / "status.json").read_text())["pid"])
            for d in sorted(p.state.glob(f"launches/*.{replica}.*"))
            if (d / "status.json").exists()]


@pytest.mark.ray_long
@pytest.mark.timeout(420)
def test_elastic_job_shrinks_when_a_host_dies_and_grows_when_it_returns(
        ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    spec = p.write("job.yaml", (EXAMPLE / "job.yaml").read_text()
                   .replace("[python, train.py", f"[python, {EXAMPLE / 'train.py'}")
                   .replace('"800"', '"500"').replace('"0.02"', '"0.05"'))
    run = p.popen("run", str(spec), "--cluster", str(p.ray_cluster({"a": 2, "b": 2})))
    try:
        wait_for("step 50", lambda: any(s >= 50 for s, _ in worlds(p, "worker-0")), 180)
        assert describe(p, "elastic-mlp")["replicas"][2]["node"] == "b"
        p.hosts.kill("b")
        wait_for("training on 2", lambda: any(w == 2 for _, w in worlds(p, "worker-0")), 90)
        p.hosts.start("b")
        out, _ = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, out
    d = describe(p, "elastic-mlp")
    assert d["state"] == "SUCCEEDED", out
    assert "shrink" in out and "grow" in out, out
    for survivor in ("worker-0", "worker-1"):  # on host a: one process throughout
        assert len(pids(p, survivor)) == 1, (survivor, pids(p, survivor))
        seen = [w for _, w in worlds(p, survivor)]
        assert [w for i, w in enumerate(seen) if i == 0 or seen[i - 1] != w] == [4, 2, 4], seen
    assert worlds(p, "worker-0")[-1] == (500, 4), out
