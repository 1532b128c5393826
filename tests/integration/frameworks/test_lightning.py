"""Lightning with PerdureCallback and PerdureCheckpointIO.

One process: a run stopped mid-epoch and resumed from perdure's checkpoint (ckpt_path=
io.latest()) ends bit-identical to an uninterrupted one. Under the controller with 2 replicas
(DDP on gloo): a SIGKILL, a preemption, 2 -> 1 and 1 -> 2 replicas. The DDP resumes do not hold
yet (strict xfail, reason below), so they run only in `make test-frameworks`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fwharness import HERE, Job, finish, tracked_jobs, trained_samples

pytest.importorskip("lightning")

SCRIPT = HERE / "pl_train.py"
SAMPLES, BATCH = 512, 8  # pl_train.py's epoch and per-rank batch


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    yield from tracked_jobs()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> str:
    job = Job(tmp_path_factory.mktemp("pl-base"), "pl", SCRIPT, 2)
    finish(job.start())
    return str(job.result()["sha256"])


DDP_RESUME = pytest.mark.xfail(strict=True, reason=(
    "Lightning DDP resume under the controller: the resumed run's weights differ from the "
    "uninterrupted run's after a kill or a preemption (a resume by hand, run after run, is "
    "exact), and a resume on another world size repeats/skips samples; not resolved"))


def run_alone(root: Path, steps: int) -> dict[str, object]:
    env = {**os.environ, "STEP_FILE": str(root / "steps.txt"), "LEDGER": "1"}
    env.pop("PERDURE_CHECKPOINT_DIR", None)
    root.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, str(SCRIPT), "--out", "out", "--steps", str(steps)],
                         cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads((root / "out" / "result.json").read_text()))


def test_one_process_resumes_mid_epoch_bit_identically(tmp_path: Path) -> None:
    whole = run_alone(tmp_path / "whole", 40)
    run_alone(tmp_path / "parts", 25)  # saved at 10 and 20 (ModelCheckpoint), stops at 25
    assert run_alone(tmp_path / "parts", 40) == whole  # resumed at 20, of 64 in the epoch
    assert [int(s) for s in (tmp_path / "parts" / "steps.txt.begin").read_text().split()] \
        == [0, 20]


@pytest.mark.frameworks_long
@DDP_RESUME
def test_kill_resumes_bit_identically(jobs: list[Job], tmp_path: Path, baseline: str) -> None:
    job = Job(tmp_path, "pl", SCRIPT, 2, env={"STEP_TIME": "0.05"})
    jobs.append(job)
    run = job.start()
    job.wait_for("step 15", lambda: job.step() >= 15)
    job.sigkill("worker-1")
    finish(run)
    assert job.result() == {"sha256": baseline, "step": 40}
    first, resumed = job.begins()
    assert first == 0 and resumed >= 10 and resumed % 10 == 0, job.begins()


@pytest.mark.frameworks_long
@DDP_RESUME
def test_preemption_saves_and_loses_no_step(jobs: list[Job], tmp_path: Path,
                                            baseline: str) -> None:
    job = Job(tmp_path, "pl", SCRIPT, 2, env={"STEP_TIME": "0.1"})
    jobs.append(job)
    run = job.start()
    job.wait_for("step 5", lambda: job.step() >= 5)
    job.cli("preempt", "pl")
    assert "SUSPENDED" in finish(run)
    assert job.result() == {"sha256": baseline, "step": 40}
    assert job.steps() == list(range(1, 41))


@pytest.mark.frameworks_long
@DDP_RESUME
@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2)])
def test_resume_on_another_world_size_trains_every_sample_once(
        jobs: list[Job], tmp_path: Path, before: int, after: int) -> None:
    """20 steps on `before` replicas (a checkpoint every 10), then the rest of the epoch on
    `after`."""
    env = {"LEDGER": "1"}
    first = Job(tmp_path, "first", SCRIPT, before, args=["--steps", "20"], env=env)
    jobs.append(first)
    finish(first.start())
    end = 20 + (SAMPLES - 20 * BATCH * before) // (BATCH * after)
    second = Job(tmp_path, "second", SCRIPT, after, args=["--steps", str(end)], env=env)
    jobs.append(second)
    finish(second.start())
    assert second.begins() == [0, 20]
    assert trained_samples(first.steps_file) == list(range(SAMPLES))
