"""The getting-started page's first job, run as written (issue 19.4): the
`<!-- docs-test: run -->` bash block of docs/getting-started.md runs in a copy of
examples/quickstart with `.venv/bin/activate` giving this test's interpreter; the first job
trains from scratch, the second resumes from the first's newest checkpoint at the exact data
position. The "before" script of the diff, an unmodified DDP
script, runs under `perdure run` too. ~30 s on 2 cores."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
BLOCK = re.compile(r"<!-- docs-test: run -->\n```bash\n(.*?)^```", re.M | re.S)
PAGE = ROOT / "docs" / "getting-started.md"


def quickstart_dir(tmp_path: Path) -> Path:
    """A copy of the repo's parts the Quickstart uses, with a venv that is this test's."""
    shutil.copytree(ROOT / "examples" / "quickstart", tmp_path / "examples" / "quickstart",
                    ignore=shutil.ignore_patterns(".perdure", "checkpoints"))
    activate = tmp_path / ".venv" / "bin" / "activate"
    activate.parent.mkdir(parents=True)
    bin_dir = Path(sys.executable).parent
    activate.write_text(f'export PATH="{bin_dir}:$PATH"\n')
    return tmp_path


def run_block(cwd: Path, text: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PERDURE_STATE_DIR"}  # ./.perdure
    return subprocess.run(["bash", "-e", "-c", text], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def outputs(state: Path) -> list[str]:
    """Every worker-0 log, in job order (one job per `perdure run`)."""
    logs = sorted(state.glob("logs/*/attempt-1/worker-0.out"), key=lambda p: p.stat().st_mtime)
    return [p.read_text() for p in logs]


def test_the_quickstart_runs_as_written_and_resumes(tmp_path: Path) -> None:
    (text,) = BLOCK.findall(PAGE.read_text())
    where = quickstart_dir(tmp_path)
    r = run_block(where, text)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "job.yaml: valid: job quickstart" in r.stdout
    assert r.stdout.count("SUCCEEDED") >= 2 and "Traceback" not in r.stdout + r.stderr
    first, second = outputs(where / "examples" / "quickstart" / ".perdure")
    assert "rank 0: starting at step 0" in first and "rank 0: done at step 96" in first
    # checkpoints every 10 steps: the newest is step 90, mid-epoch 3 (32 steps an epoch);
    # the data position resumed there, so the job ends at step 96, not 90 + 96
    assert "rank 0: starting at step 90" in second and "rank 0: done at step 96" in second


def test_the_unmodified_script_runs_under_perdure(tmp_path: Path) -> None:
    where = quickstart_dir(tmp_path) / "examples" / "quickstart"
    (where / "before.yaml").write_text(
        "name: before\npools: [{name: worker, replicas: 2, command: [python, before.py, '1']}]\n")
    r = subprocess.run([sys.executable, "-m", "perdure.cli.main", "run", "before.yaml",
                        "--cluster", "cluster.yaml"], cwd=where, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (log,) = outputs(where / ".perdure")
    assert "rank 0: done at step 32" in log
