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



def test_a_failure_rate_that_would_never_finish_is_refused_at_once(tmp_path: Path) -> None:
    # 16,384 GPUs for 54 days: ~8.8e11 failures at a million per GPU-day; the simulation ran
    # past 60 s at 2.9 GB and kept growing.
    example = Path(__file__).resolve().parents[2] / "examples" / "llama3-16k"
    for storm, field in (("per_gpu_day: 1000000", "categories.0.per_gpu_day"),
                         ("mtbf_hours: 0.0001", "categories.1.mtbf_hours")):
        ok = "{name: rare, mtbf_hours: 100000, scope: gpu, kind: transient}"
        bad = f"{{name: storm, {storm}, scope: gpu, kind: transient}}"
        both = [bad, ok] if field.startswith("categories.0") else [ok, bad]
        (tmp_path / "f.yaml").write_text("categories:\n" + "".join(f"  - {c}\n" for c in both))
        out = subprocess.run([sys.executable, "-m", "perdure.cli.main", "--state-dir",
                              str(tmp_path / "state"), "sim", str(example / "job.yaml"),
                              "--cluster", str(example / "cluster.yaml"), "--failures",
                              str(tmp_path / "f.yaml"), "--days", "54"],
                             text=True, capture_output=True, timeout=60, cwd=tmp_path)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert field in out.stderr and "at most 1,000,000" in out.stderr, out.stderr
        assert out.stderr.startswith(f"perdure sim: {tmp_path / 'f.yaml'}: {field} ")
        assert "16,384 GPUs" in out.stderr and "Traceback" not in out.stderr
