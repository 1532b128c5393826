"""PerdureTrainer (perdure's checkpoints and elastic sampler in a Hugging Face Trainer) under
the real controller: bit-identical after a kill and a preemption on 2 replicas; every sample
of the epoch exactly once across a resume on 2 -> 1 and 1 -> 2 replicas."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fwharness import HERE, Job, finish, tracked_jobs, trained_samples

pytest.importorskip("transformers")

SCRIPT = HERE / "hf_train.py"
PERDURE = ["--trainer", "perdure"]
SAMPLES = 256  # hf_train.py's data set: one epoch


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    yield from tracked_jobs()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> str:
    job = Job(tmp_path_factory.mktemp("hft-base"), "hft", SCRIPT, 2, args=PERDURE)
    finish(job.start())
    return str(job.result()["sha256"])


def test_kill_resumes_bit_identically_from_perdures_checkpoint(
        jobs: list[Job], tmp_path: Path, baseline: str) -> None:
    job = Job(tmp_path, "hft", SCRIPT, 2, args=PERDURE, env={"STEP_TIME": "0.05"})
    jobs.append(job)
    run = job.start()
    job.wait_for("step 15", lambda: job.step() >= 15)
    job.sigkill("worker-1")
    finish(run)
    assert job.result()["sha256"] == baseline
    first, resumed = job.begins()
    assert first == 0 and resumed >= 10 and resumed % 10 == 0, job.begins()
    assert sorted(p.name for p in job.ckpt.iterdir() if p.name.startswith("step-"))[-1] == \
        "step-00000040"  # perdure's format, not checkpoint-N folders
    assert not list(job.ckpt.glob("checkpoint-*"))
    # Goodput counts each save and each resume once: the callback's span, which holds the
    # Checkpointer's (it reports none of its own here).
    for replica in ("worker-0", "worker-1"):
        launches = job.progress(replica)
        assert len(launches) == 2, launches.keys()
        for records in launches.values():
            assert [r["kind"] for r in records].count("restore") == 1, records
            saved = [r["step"] for r in records if r["kind"] == "checkpoint_save"]
            assert saved and len(saved) == len(set(saved)), saved


@pytest.mark.frameworks_long
def test_preemption_resumes_bit_identically_with_no_step_lost(
        jobs: list[Job], tmp_path: Path, baseline: str) -> None:
    # the notice must land in the 35 steps after step 5: ~9 s, room for the CLI under load
    job = Job(tmp_path, "hft", SCRIPT, 2, args=PERDURE, env={"STEP_TIME": "0.25"})
    jobs.append(job)
    run = job.start()
    job.wait_for("step 5", lambda: job.step() >= 5)
    job.cli("preempt", "hft")
    assert "SUSPENDED" in finish(run)
    assert job.result()["sha256"] == baseline
    assert job.steps() == list(range(1, 41))


@pytest.mark.frameworks_long
@pytest.mark.parametrize(("before", "after", "end"), [(2, 1, 40), (1, 2, 44)])
def test_resume_on_another_world_size_trains_every_sample_once(
        jobs: list[Job], tmp_path: Path, before: int, after: int, end: int) -> None:
    """24 steps on `before` replicas (24 * 4 * before samples; the Trainer saves its last
    step), then the rest of the epoch on `after`, in steps of 4 * after samples."""
    env = {"LEDGER": "1"}
    first = Job(tmp_path, "first", SCRIPT, before, args=[*PERDURE, "--steps", "24"], env=env)
    jobs.append(first)
    finish(first.start())
    second = Job(tmp_path, "second", SCRIPT, after, args=[*PERDURE, "--steps", str(end)],
                 env=env)
    jobs.append(second)
    finish(second.start())
    assert second.begins() == [0, 24]  # the same steps file: the second resumed at 24
    assert second.result()["step"] == end
    assert trained_samples(first.steps_file) == list(range(SAMPLES))
