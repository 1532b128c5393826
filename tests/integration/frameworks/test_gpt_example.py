"""examples/gpt (FSDP2 on gloo, token shards through perdure's cache) under the real
controller, at a small size: a SIGKILL resumes bit-identically on 2 replicas; a run resharded
2 -> 1 -> 2 replicas resumes each time from the step the previous one committed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fwharness import Job, finish, tracked_jobs

GPT = Path(__file__).resolve().parents[3] / "examples" / "gpt" / "train.py"
SMALL = ["--dim", "64", "--layers", "2", "--heads", "2", "--vocab", "256", "--seq", "64",
         "--shards", "4", "--per-shard", "32", "--checkpoint-every", "5"]


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    yield from tracked_jobs()


def gpt_job(root: Path, name: str, replicas: int, steps: int) -> Job:
    args = [*SMALL, "--steps", str(steps), "--data", str(root / "data"),
            "--step-file", str(root / "steps.txt")]
    return Job(root, name, GPT, replicas, args=args)


@pytest.mark.frameworks_long  # make test-frameworks
def test_gpt_kill_resumes_bit_identically(jobs: list[Job], tmp_path: Path) -> None:
    base = gpt_job(tmp_path / "base", "gpt", 2, 24)
    jobs.append(base)
    finish(base.start())
    job = gpt_job(tmp_path / "kill", "gpt", 2, 24)
    jobs.append(job)
    run = job.start()
    job.wait_for("step 7", lambda: job.step() >= 7)
    job.sigkill("worker-1")  # at once: `perdure chaos kill` may find the job done, or its
    # replica not yet seen running by a loaded controller
    finish(run)
    assert job.result()["sha256"] == base.result()["sha256"]
    assert job.describe()["replicas"][1]["restarts"] == 1


@pytest.mark.frameworks_long
def test_gpt_reshards_on_resume_2_1_2(jobs: list[Job], tmp_path: Path) -> None:
    for name, replicas, steps in (("two", 2, 10), ("one", 1, 20), ("again", 2, 30)):
        job = gpt_job(tmp_path, name, replicas, steps)
        jobs.append(job)
        out = finish(job.start())
        assert job.result() | {"sha256": ""} == {"sha256": "", "steps": steps,
                                                "world_size": replicas}, out[-2000:]
    logs = sorted((tmp_path / "state" / "logs").glob("*/attempt-1/worker-0.out"))
    starts = sorted(line for log in logs for line in log.read_text().splitlines()
                    if line.startswith("start at step"))
    assert [s.split(" on ")[0] for s in starts] == \
        ["start at step 0", "start at step 10", "start at step 20"]
