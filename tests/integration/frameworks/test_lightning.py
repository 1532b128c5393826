"""Lightning with PerdureCallback and PerdureCheckpointIO.

One process: a run resumed from perdure's checkpoint (ckpt_path=io.latest()), mid-epoch or
at an epoch's last step, ends bit-identical to an uninterrupted one, through the next epoch.
Under the controller with 2 replicas (DDP on gloo), in `make test-frameworks`: a SIGKILL, a
preemption, and a resume on 2 -> 1 and 1 -> 2 replicas.
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
SAMPLES, BATCH = 512, 8  # pl_train.py's epoch and per-rank batch: 64 steps alone, 32 on 2


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    yield from tracked_jobs()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> str:
    job = Job(tmp_path_factory.mktemp("pl-base"), "pl", SCRIPT, 2)
    finish(job.start())
    return str(job.result()["sha256"])


def run_alone(root: Path, steps: int, every: int = 10, data: str = "") -> dict[str, object]:
    """pl_train.py in one process, a checkpoint every `every` steps, to `steps` steps."""
    env = {**os.environ, "STEP_FILE": str(root / "steps.txt"), "LEDGER": "1",
           "CKPT_EVERY": str(every), "DATA": data}
    env.pop("PERDURE_CHECKPOINT_DIR", None)
    root.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, str(SCRIPT), "--out", "out", "--steps", str(steps)],
                         cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads((root / "out" / "result.json").read_text()))


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """80 steps uninterrupted: the epoch of 64 and 16 of the next."""
    return run_alone(tmp_path_factory.mktemp("pl-whole"), 80)


def begins(root: Path) -> list[int]:
    return [int(s) for s in (root / "steps.txt.begin").read_text().split()]


@pytest.mark.frameworks_long  # make test-frameworks: the default suite keeps one Lightning run
def test_one_process_resumes_mid_epoch_bit_identically(tmp_path: Path,
                                                       whole: dict[str, object]) -> None:
    """Resumed at step 20, the epoch still ends at its 64th step (it used to end 20 steps
    early: Lightning counted the 20 steps taken against the 44 left)."""
    run_alone(tmp_path, 25)  # saved at 10 and 20 (ModelCheckpoint), stops at 25
    assert run_alone(tmp_path, 80) == whole
    assert begins(tmp_path) == [0, 20]


@pytest.mark.frameworks_long  # make test-frameworks: the default suite keeps one Lightning run
def test_one_process_resumes_at_the_end_of_an_epoch(tmp_path: Path,
                                                    whole: dict[str, object]) -> None:
    """Saved at the epoch's last step, the resume trains the next epoch (it used to train
    nothing and end at once: no steps left in the loader looked like no data)."""
    assert run_alone(tmp_path, 64, every=32)["step"] == 64
    assert run_alone(tmp_path, 80, every=32) == whole
    assert begins(tmp_path) == [0, 64]


@pytest.mark.frameworks_long
def test_shards_cross_epochs_and_resume_before_the_batch_read_ahead(tmp_path: Path) -> None:
    """A ShardDataset has no length: Lightning reads a batch ahead and sets no epoch on it.
    The second epoch used to find its shards read (a run with max_steps never ended), and a
    resume skipped the batch read ahead of the save (other weights)."""
    whole = run_alone(tmp_path / "whole", 80, data="shards")  # 64 steps an epoch
    assert whole["step"] == 80
    run_alone(tmp_path / "cut", 25, data="shards")  # saved at 10 and 20
    assert run_alone(tmp_path / "cut", 80, data="shards") == whole
    assert begins(tmp_path / "cut") == [0, 20]


@pytest.mark.frameworks_long
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
def test_preemption_saves_and_loses_no_step(jobs: list[Job], tmp_path: Path,
                                            baseline: str) -> None:
    # the notice must land in the 35 steps after step 5: ~9 s, room for the CLI under load
    job = Job(tmp_path, "pl", SCRIPT, 2, env={"STEP_TIME": "0.25"})
    jobs.append(job)
    run = job.start()
    job.wait_for("step 5", lambda: job.step() >= 5)
    job.cli("preempt", "pl")
    assert "SUSPENDED" in finish(run)
    assert job.result() == {"sha256": baseline, "step": 40}
    assert job.steps() == list(range(1, 41))


@pytest.mark.frameworks_long
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
