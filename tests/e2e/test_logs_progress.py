"""What a new user reads through the CLI (issue 19 section 3): logs, progress, ls, describe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

PERDURE = [sys.executable, "-m", "perdure.cli.main"]
SCRIPT = """
import sys, time
from perdure.runtime import goodput
goodput.total(40)
for step in range(1, 41):
    with goodput.step(step):
        time.sleep(0.02)
    print(f"out {step}", flush=True)
    print(f"err {step}", file=sys.stderr, flush=True)
"""


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PERDURE, "--state-dir", str(tmp / "state"), *args],
                          capture_output=True, text=True, timeout=180, check=False)


def test_logs_merge_both_streams_and_run_ls_describe_show_progress(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"name": "talk", "pools": [
        {"name": "worker", "replicas": 2, "command": ["python", "train.py"]}]}))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(
        {"backend": "local", "nodes": [{"name": "local", "slots": 2}]}))
    run = cli(tmp_path, "run", str(tmp_path / "job.yaml"), "--cluster",
              str(tmp_path / "cluster.yaml"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "progress: step 40 / 40 · " in run.stdout and "steps/s" in run.stdout
    assert "SIGTERM" not in run.stdout and "exited 143" not in run.stdout
    assert "all 2 replicas started" in run.stdout and "2 slots" in run.stdout

    merged = cli(tmp_path, "logs", "talk").stdout.splitlines()
    body = [line for line in merged if not line.startswith("===")]
    # In time order: the steps (20 ms apart) in order; a step's two lines, written
    # microseconds apart on two streams, may come either way round.
    assert sorted(body) == sorted(f"{s} {i}" for i in range(1, 41) for s in ("out", "err"))
    assert [int(line.split()[1]) for line in body] == sorted(
        int(line.split()[1]) for line in body)
    assert "err 1" not in cli(tmp_path, "logs", "talk", "--stdout").stdout
    assert "out 1" not in cli(tmp_path, "logs", "talk", "--stderr").stdout
    assert cli(tmp_path, "logs", "talk", "--follow").stdout.splitlines() == merged

    d = json.loads(cli(tmp_path, "describe", "talk", "--json").stdout)
    assert (d["step"], d["total_steps"]) == (40, 40)
    assert [r["status"] for r in d["replicas"]] == ["finished", "finished"]
    text = cli(tmp_path, "describe", "talk").stdout
    assert "step 40 / 40" in text and "None" not in text
    listed = json.loads(cli(tmp_path, "ls", "--json").stdout)[0]
    assert (listed["step"], listed["total_steps"]) == (d["step"], d["total_steps"])
    table = cli(tmp_path, "ls").stdout
    header = table.splitlines()[0].split()
    assert {"STEP", "GOODPUT", "AGE", "DURATION"} <= set(header)
    assert "40 / 40" in table and "%" in table


def test_a_script_that_reports_nothing_shows_no_progress_reported(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"name": "quiet", "pools": [
        {"name": "worker", "command": ["python", "-c", "print('hi')"]}]}))
    assert cli(tmp_path, "run", str(tmp_path / "job.yaml")).returncode == 0
    text = cli(tmp_path, "describe", "quiet").stdout
    assert "Goodput: no progress reported" in text and "0.0%" not in text
    assert "no progress reported" in cli(tmp_path, "ls").stdout
