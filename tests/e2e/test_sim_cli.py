"""`perdure sim` as a user runs it: a table or JSON per policy, clear errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SPEC = """name: mid
pools: [{name: w, replicas: 32, slots: 8, command: [python, train.py]}]
restart: {max_replica_restarts: 20, max_job_retries: 20}
checkpoint: {every_seconds: 1800}
"""


def perdure(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perdure.cli.main", "--state-dir",
                           str(tmp / "state"), *args], text=True, capture_output=True,
                          timeout=300, cwd=tmp)


def files(tmp: Path) -> tuple[str, str]:
    (tmp / "job.yaml").write_text(SPEC)
    nodes = "\n".join(f"  - {{name: n{i:02d}, slots: 8}}" for i in range(36))
    (tmp / "cluster.yaml").write_text(f"nodes:\n{nodes}\n")
    return str(tmp / "job.yaml"), str(tmp / "cluster.yaml")


def test_sim_compares_policies(tmp_path: Path) -> None:
    job, cluster = files(tmp_path)
    # 256 GPUs for 30 days at Llama 3's rates: about 4 faults
    out = perdure(tmp_path, "sim", job, "--cluster", cluster, "--days", "30", "--seed", "3",
                  "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    got = {p["policy"]: p for p in doc["policies"]}
    assert list(got) == ["checkpoint-restart", "perdure-default", "perdure-best"]
    assert doc["gpus"] == 256 and doc["failures"] == "llama3"
    faults = {p["interruptions"] for p in got.values()}
    assert len(faults) == 1 and faults.pop() > 0  # the same draw for every policy
    assert got["perdure-best"]["ettr"] > got["checkpoint-restart"]["ettr"]
    assert set(got["perdure-best"]["badput_hours"]) >= {"startup", "wasted_progress"}
    table = perdure(tmp_path, "sim", job, "--cluster", cluster, "--days", "2",
                    "--policy", "perdure-default")
    assert table.returncode == 0, table.stderr
    assert "perdure-default" in table.stdout and "ETTR" in table.stdout
    assert "checkpoint-restart" not in table.stdout


def test_sim_bad_input_names_it(tmp_path: Path) -> None:
    job, cluster = files(tmp_path)
    for args, says in (
        (["--policy", "fastest"], "--policy: unknown fastest"),
        (["--failures", str(tmp_path / "nope.yaml")], "cannot read the failure file"),
        (["--calibration", "a100"], "cannot read the calibration file"),
    ):
        out = perdure(tmp_path, "sim", job, "--cluster", cluster, "--days", "1", *args)
        assert out.returncode == 2 and says in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr
    out = perdure(tmp_path, "sim", job)
    assert out.returncode == 2 and "--cluster" in out.stderr
