"""End to end through the CLI, as a user drives it: the elastic example loses a node (two of
its four replicas), trains on as a group of 2 without restarting the survivors, and grows back
to 4 when the node is restored; the job succeeds and no restart is spent."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "elastic_mlp"
PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def worlds(state: Path, replica: str) -> list[tuple[int, int]]:
    """(step, world size) lines `replica` printed."""
    out: list[tuple[int, int]] = []
    for log in state.glob(f"logs/*/attempt-1/{replica}.out"):
        out += [(int(s), int(w)) for s, w in re.findall(r"^step (\d+) world (\d+)",
                                                          log.read_text(), re.M)]
    return out


def wait_for(what: str, pred: object, run: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():  # type: ignore[operator]
            return
        if run.poll() is not None:
            raise AssertionError(f"perdure run exited {run.returncode} before {what}: "
                                 f"{run.stdout.read() if run.stdout else ''}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


# ~40 s each: make test-transport (the default suite's elastic shrink and grow are covered by
# the controller's and the runtime's elastic tests; this one is the CLI end to end, per transport)
@pytest.mark.parametrize("transport", [
    pytest.param("file", marks=pytest.mark.transport_long),
    pytest.param("net", marks=pytest.mark.transport_long)])
def test_a_lost_node_shrinks_the_job_and_its_return_grows_it_back(tmp_path: Path,
                                                                   transport: str) -> None:
    """Under `transport: net` every runtime contract (rounds, barriers and the store, ready
    and finished markers, holders, progress) goes through the controller's relay."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text((EXAMPLE / "cluster.yaml").read_text() + f"transport: {transport}\n")
    spec = tmp_path / "job.yaml"
    spec.write_text((EXAMPLE / "job.yaml").read_text()
                    .replace("[python, train.py", f"[python, {EXAMPLE / 'train.py'}")
                    .replace('"800"', '"500"').replace('"0.02"', '"0.05"'))
    state = tmp_path / "state"
    cli = [*PERDURE, "--state-dir", str(state)]
    run = subprocess.Popen([*cli, "run", str(spec), "--cluster", str(cluster)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for("step 50", lambda: any(s >= 50 for s, _ in worlds(state, "worker-2")), run,
                 180)
        subprocess.run([*cli, "chaos", "fail-node", "a"], check=True, capture_output=True)
        wait_for("training on 2", lambda: any(w == 2 for _, w in worlds(state, "worker-2")),
                 run, 60)
        subprocess.run([*cli, "node", "restore", "a"], check=True, capture_output=True)
        out, _ = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, out
    d = json.loads(subprocess.run([*cli, "describe", "elastic-mlp", "--json"], check=True,
                                  capture_output=True, text=True).stdout)
    assert d["state"] == "SUCCEEDED", out
    assert [r["restarts"] for r in d["replicas"]] == [0, 0, 0, 0], out  # not failures
    assert "shrink 4 -> 2" in out and "grow 2 -> 4" in out, out  # lost together: one change
    assert "shrink 4 -> 3" not in out and "grow 3 -> 4" not in out, out
    # describe lists each change with its reason and what it cost: the survivors' rebuilds
    changes = {c["what"].split(": ", 1)[1].split(":")[0]: c for c in d["elastic"]}
    assert {"shrink 4 -> 2", "grow 2 -> 4"} <= set(changes), d["elastic"]
    costs = [c["cost_seconds"] for c in d["elastic"] if c["cost"] == "group rebuilt"]
    assert costs and all(0 < s < 30 for s in costs), d["elastic"]
    assert d["goodput"]["badput_seconds"]["elastic"] == pytest.approx(sum(costs))
    text = subprocess.run([*cli, "describe", "elastic-mlp"], check=True, capture_output=True,
                          text=True).stdout
    assert "Elastic changes" in text and "[group rebuilt]" in text, text
    for survivor in ("worker-2", "worker-3"):  # one process throughout: 4 -> 2 -> 4
        log = next(state.glob(f"logs/*/attempt-1/{survivor}.out")).read_text()
        seen = [w for _, w in worlds(state, survivor)]
        assert [w for i, w in enumerate(seen) if i == 0 or seen[i - 1] != w] == [4, 2, 4], log
        assert log.count("state from scratch") == 1, log
    assert worlds(state, "worker-0")[-1] == (500, 4), out
