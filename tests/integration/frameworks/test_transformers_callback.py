"""A stock Hugging Face Trainer with PerdureCallback, 2 replicas under the real controller.

Every faulted run ends with exactly the weights of the uninterrupted run: after a SIGKILL,
after a SIGKILL in the middle of a save (the half-written `checkpoint-N` is skipped, moved
aside and named in the job's events), and after a preemption (saved at the step the ranks
agreed on, resumed there: no step lost).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fwharness import HERE, Job, finish, tracked_jobs

pytest.importorskip("transformers")

SCRIPT = HERE / "hf_train.py"
SLOW = {"STEP_TIME": "0.05"}


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    yield from tracked_jobs()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> str:
    job = Job(tmp_path_factory.mktemp("hf-base"), "hf", SCRIPT, 2)
    finish(job.start())
    return str(job.result()["sha256"])


@pytest.mark.frameworks_long  # ~40 s; the Trainer's own kill test stays in the default suite
def test_kill_resumes_from_the_trainers_checkpoint(jobs: list[Job], tmp_path: Path,
                                                   baseline: str) -> None:
    job = Job(tmp_path, "hf", SCRIPT, 2, env=SLOW)
    jobs.append(job)
    run = job.start()
    job.wait_for("step 15", lambda: job.step() >= 15)
    job.sigkill("worker-1")
    finish(run)
    assert job.result()["sha256"] == baseline
    assert job.result()["output_dir"] == str(job.ckpt)  # the job's checkpoint dir
    first, resumed = job.begins()
    assert first == 0 and resumed >= 10 and resumed % 10 == 0, job.begins()
    goodput = job.describe()["goodput"]
    assert goodput["last_step"] == 40 and goodput["productive_seconds"] > 0


# ~20 s each: in make test-frameworks, to keep the default suite within its time.
@pytest.mark.frameworks_long
def test_kill_during_a_save_skips_the_half_written_checkpoint(jobs: list[Job], tmp_path: Path,
                                                              baseline: str) -> None:
    job = Job(tmp_path, "hf", SCRIPT, 2, env={**SLOW, "SLOW_SAVE_AT": "20"})
    jobs.append(job)
    run = job.start()
    saving = Path(f"{job.steps_file}.saving")
    job.wait_for("the save of checkpoint-20", saving.exists)
    time.sleep(0.5)
    job.sigkill("worker-0")
    finish(run)
    assert job.result()["sha256"] == baseline
    assert job.begins() == [0, 10]  # not the half-written checkpoint-20
    assert (job.ckpt / "incomplete-checkpoint-20").is_dir()
    events = [e["message"] for e in job.describe()["events"]]
    assert any("checkpoint-20" in m and "not completed by every rank" in m for m in events), \
        events


# ~20 s each: in make test-frameworks, to keep the default suite within its time.
@pytest.mark.frameworks_long
def test_preemption_saves_where_the_ranks_agree_and_loses_no_step(
        jobs: list[Job], tmp_path: Path, baseline: str) -> None:
    # the notice must land in the 35 steps after step 5: ~9 s, room for the CLI under load
    job = Job(tmp_path, "hf", SCRIPT, 2, env={"STEP_TIME": "0.25"})
    jobs.append(job)
    run = job.start()
    job.wait_for("step 5", lambda: job.step() >= 5)
    job.cli("preempt", "hf")
    out = finish(run)
    assert "SUSPENDED" in out
    assert job.result()["sha256"] == baseline
    first, resumed = job.begins()
    assert first == 0 and 5 < resumed < 40, job.begins()
    assert job.steps() == list(range(1, 41))  # every step once: none lost, none redone
    assert (job.ckpt / f"checkpoint-{resumed}").is_dir()
    d = job.describe()
    assert d["attempt"] == 2 and all(r["restarts"] == 0 for r in d["replicas"])
