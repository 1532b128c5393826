"""The hang rules, transition by transition with a fake clock (core.watchdog, core.stacks)."""

from __future__ import annotations

from perdure.core import stacks
from perdure.core.events import ReplicaProgress
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import parse_job_spec
from perdure.core.states import JobState, ReplicaState
from perdure.core.watchdog import AUTO_FLOOR_SECONDS, RankAt, Suspect, Watchdog, verdict


def running_job(hang: str = "10", replicas: int = 2) -> Job:
    spec = parse_job_spec(f"""
name: j
pools: [{{name: worker, replicas: {replicas}, command: [python, t.py]}}]
watchdog: {{hang_seconds: {hang}}}
""")
    job = Job("j-1", spec, "/tmp", 0.0, state=JobState.RUNNING, attempt=1,
              replicas=make_replicas(spec))
    for r in job.replicas:
        r.state, r.launch_id = ReplicaState.RUNNING, f"j-1.1.{r.name}.1"
    return job


def progress(job: Job, i: int, step: int, t: float, steps: int = 1,
             seconds: float = 0.1) -> ReplicaProgress:
    return ReplicaProgress(job.replicas[i].launch_id or "", step, t, steps, seconds)


def test_a_job_that_reports_no_progress_is_never_hung() -> None:
    job, w = running_job(), Watchdog()
    assert w.check({job.id: job}, 1e6) == []


def test_the_clock_starts_at_the_first_step_not_at_the_launch() -> None:
    job, w = running_job(), Watchdog()
    # a restore (no steps) long after the launch: still no clock
    w.progress(job, ReplicaProgress(job.replicas[0].launch_id or "", 0, 500.0))
    assert w.check({job.id: job}, 1000.0) == []
    w.progress(job, progress(job, 0, 1, 1000.0))
    assert w.check({job.id: job}, 1009.0) == []
    found = w.check({job.id: job}, 1010.5)
    assert [s.job_id for s in found] == ["j-1"] and found[0].stalled_for == 10.5
    assert w.check({job.id: job}, 1020.0) == []  # reported once per stall


def test_any_rank_advancing_resets_the_clock_and_a_new_round_starts_over() -> None:
    job, w = running_job(), Watchdog()
    w.progress(job, progress(job, 0, 1, 0.0))
    w.progress(job, progress(job, 1, 1, 8.0, steps=0))  # a save or data wait counts
    assert w.check({job.id: job}, 15.0) == []
    job.replicas[1].launch_id = "j-1.1.worker-1.2"  # restarted: a new round
    assert w.check({job.id: job}, 100.0) == []  # its clock waits for its own first step


def test_auto_is_twenty_times_the_p99_step_time_with_a_floor() -> None:
    job, w = running_job("auto"), Watchdog()
    w.progress(job, progress(job, 0, 100, 0.0, steps=100, seconds=1.0))
    assert w.hang_seconds(job) == AUTO_FLOOR_SECONDS
    w.progress(job, progress(job, 0, 200, 1.0, steps=100, seconds=30.0))
    assert w.hang_seconds(job) == 600.0


def suspect(*steps: int | None) -> Suspect:
    return Suspect("j-1", 1, 12.0, 10.0, tuple(
        RankAt(f"worker-{i}", f"j-1.1.worker-{i}.1", s) for i, s in enumerate(steps)))


def dump(*frames: tuple[str, str]) -> list[dict[str, object]]:
    return [{"thread_name": "MainThread", "os_thread_id": 1, "frames": [
        {"name": n, "filename": f, "short_filename": f.rsplit("/", 1)[-1], "line": 3}
        for n, f in frames]}]


WAITING = stacks.summarize(dump(
    ("all_reduce", "/v/site-packages/torch/distributed/distributed_c10d.py"),
    ("train", "/job/train.py")))
SLEEPING = stacks.summarize(dump(("load_batch", "/job/train.py"), ("train", "/job/train.py")))


def test_the_laggard_is_the_rank_outside_the_collective() -> None:
    v = verdict(suspect(7, 7, 7), {"worker-0": WAITING, "worker-1": SLEEPING,
                                   "worker-2": WAITING})
    assert v.laggard.replica == "worker-1"
    assert "load_batch (train.py:3)" in v.message and v.message.startswith("Replica worker-1")
    assert v.where[0] == ("worker-0 step 7: in a collective, at all_reduce "
                          "(distributed_c10d.py:3) called from train (train.py:3)")


def test_without_stacks_the_lowest_step_is_blamed_and_a_tie_says_so() -> None:
    missing = stacks.unavailable("py-spy could not read pid 9: Permission denied")
    v = verdict(suspect(9, 4, 9), {"worker-0": missing})
    assert v.laggard.replica == "worker-1" and "lowest step (4" in v.reason
    assert "no stacks (py-spy could not read pid 9" in v.where[0]
    tie = verdict(suspect(5, 5), {"worker-0": WAITING, "worker-1": WAITING})
    assert tie.laggard.replica == "worker-0" and "no rank stood out" in tie.reason


def test_stack_summary_of_a_dump_without_a_main_thread_uses_the_first() -> None:
    s = stacks.summarize([{"thread_name": "Dummy", "frames": []}])
    assert s.attached and not s.in_collective and "no Python frames" in s.where
    assert not stacks.summarize([]).attached


def test_bad_watchdog_and_interval_fields_are_named() -> None:
    import pytest

    from perdure.core.specread import SpecError

    base = "name: j\npools: [{name: w, command: [python, t.py]}]\n"
    for text, needle in (
        ("watchdog: {hang_seconds: -1}", "watchdog.hang_seconds: use auto or a number"),
        ("watchdog: {hang_seconds: soon}", "watchdog.hang_seconds: use auto or a number"),
        ("watchdog: {stragglers: kill}", "watchdog.stragglers"),
        ("checkpoint: {every: auto, every_steps: 5}", "give one of every: auto, every_steps"),
        ("checkpoint: {every: sometimes}", "checkpoint.every"),
    ):
        with pytest.raises(SpecError) as err:
            parse_job_spec(base + text)
        assert needle in str(err.value), str(err.value)
    spec = parse_job_spec(base + "checkpoint: {every: auto}\nwatchdog: {hang_seconds: 30}")
    assert spec.checkpoint.every == "auto" and spec.checkpoint.max_interval_seconds == 14400
    assert spec.watchdog.hang_seconds == 30.0 and spec.watchdog.stragglers == "report"


def test_a_straggler_is_named_once_the_window_is_full_and_again_only_after_recovering() -> None:
    from perdure.core.straggler import WINDOW_STEPS, Stragglers

    job, s = running_job(replicas=3), Stragglers()
    for r in job.replicas:
        r.node = f"n{r.index}"

    def report(i: int, seconds: float, steps: int = 10) -> None:
        s.progress(job, progress(job, i, 0, 0.0, steps=steps, seconds=seconds))

    for _ in range(WINDOW_STEPS // 10 - 1):
        for i, sec in enumerate((0.1, 0.1, 0.2)):
            report(i, sec)
    assert s.check({job.id: job}) == []  # the window is not full yet
    for i, sec in enumerate((0.1, 0.12, 0.2)):
        report(i, sec)
    [found] = s.check({job.id: job})
    assert (found.replica, found.node) == ("worker-2", "n2") and found.others > 0.1
    assert s.check({job.id: job}) == []  # once
    for _ in range(WINDOW_STEPS // 10):
        report(2, 0.1)
    assert s.check({job.id: job}) == []  # recovered
    for _ in range(WINDOW_STEPS // 10):
        report(2, 0.3)
    assert [x.replica for x in s.check({job.id: job})] == ["worker-2"]


def test_synchronous_ranks_with_equal_step_times_name_no_straggler() -> None:
    from perdure.core.straggler import Stragglers

    job, s = running_job(replicas=2), Stragglers()
    for _ in range(10):
        for i in range(2):
            s.progress(job, progress(job, i, 0, 0.0, steps=10, seconds=0.3))
    assert s.check({job.id: job}) == []


def test_stack_samples_name_the_rank_the_others_wait_for_once() -> None:
    from perdure.core.straggler import SAMPLES_NEEDED, Stragglers

    job, s = running_job(replicas=2), Stragglers()
    a, b = (r.launch_id or "" for r in job.replicas)
    for _ in range(SAMPLES_NEEDED - 1):
        s.sampled(job, {a: True, b: False})
        s.sampled(job, {a: False, b: False})  # both busy: tells nothing
    assert s.check({job.id: job}) == []
    s.sampled(job, {a: True, b: False})
    for _ in range(3):  # equal step times must not make it "recover" and be named again
        for i in range(2):
            s.progress(job, progress(job, i, 0, 0.0, steps=50, seconds=0.2))
    [found] = s.check({job.id: job})
    assert found.replica == "worker-1" and "outside any collective in 10 of 10" in found.message()
    assert s.check({job.id: job}) == []
