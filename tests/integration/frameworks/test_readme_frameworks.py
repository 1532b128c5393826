"""The framework guides run as written (docs/guides/hf-trainer.md, lightning.md): each page's
script and job spec, under perdure."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fwharness import Job, tracked_jobs

GUIDES = Path(__file__).resolve().parents[3] / "docs" / "guides"


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    yield from tracked_jobs()


def section(page: str) -> tuple[str, str]:
    """The python script and the job spec of the guide `page` (one of each)."""
    text = (GUIDES / page).read_text()
    [script] = re.findall(r"```python\n(.*?)```", text, re.S)
    [spec] = re.findall(r"```yaml\n(.*?)```", text, re.S)
    return script, spec


def run_section(page: str, root: Path, jobs: list[Job]) -> Path:
    script, spec = section(page)
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(script)
    name = re.search(r"^name: (\S+)", spec, re.M)
    assert name is not None
    job = Job(root, name.group(1), root / "train.py", 2)
    (root / "job.yaml").write_text(spec)
    jobs.append(job)
    out = subprocess.run([sys.executable, "-m", "perdure.cli.main", "--state-dir",
                          str(job.state), "run", str(root / "job.yaml")], cwd=root,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    return root


@pytest.mark.frameworks_long  # make test-frameworks
def test_the_hugging_face_guide_runs_as_written(tmp_path: Path, jobs: list[Job]) -> None:
    pytest.importorskip("transformers")
    root = run_section("hf-trainer.md", tmp_path, jobs)
    done = sorted(p.name for p in (root / "checkpoints").glob("checkpoint-*"))
    assert done == ["checkpoint-20", "checkpoint-40", "checkpoint-60"]
    for name in done:
        markers = root / "checkpoints" / name / ".perdure-complete"
        assert sorted(m.name for m in markers.iterdir()) == ["rank-0-of-2", "rank-1-of-2"]


@pytest.mark.frameworks_long  # make test-frameworks
def test_the_lightning_guide_runs_as_written(tmp_path: Path, jobs: list[Job]) -> None:
    pytest.importorskip("lightning")
    root = run_section("lightning.md", tmp_path, jobs)
    committed = sorted(p.parent.name for p in (root / "checkpoints").glob("step-*/COMMITTED"))
    assert committed[-1] == "step-00000100"  # ModelCheckpoint: each epoch and the end
