"""What a person reads about a job: crash loops named, restarts kept, a cancel, the others'
finish after the primary succeeded, plural words (issue 19, sections 1 and 3)."""

from __future__ import annotations

from tests.helpers.sim import Sim, spec

from perdure.backends.fake import FakeRun
from perdure.core.events import ErrorInfo, Launch
from perdure.core.states import ErrorCode, JobState
from perdure.core.text import all_of, plural

PEER = ErrorInfo("RuntimeError", "[../gloo/transport/tcp/pair.cc:534] Connection closed by peer")


def pools(replicas: int = 1, **extra: object) -> list[dict[str, object]]:
    return [{"name": "worker", "replicas": replicas, "command": ["python", "t.py"], **extra}]


def test_a_crash_loop_is_named_after_its_exception() -> None:
    # An exception the rules restart on (it looks like a lost peer), raised after every restart.
    sim = Sim(script=lambda launch: FakeRun(0.5, 1, error=PEER))
    j = sim.submit(spec(pools=pools(), restart={"max_replica_restarts": 2, "max_job_retries": 1}))
    job = sim.run_until(j, {JobState.FAILED}, steps=2000)
    assert job.error is not None and job.error.code is ErrorCode.USER_CODE
    assert "non-zero status" not in job.error.message
    assert job.error.message == (
        "Replica worker-0 raised the same exception 6 times in a row (a crash loop): "
        "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer.")


def test_different_exceptions_are_no_crash_loop() -> None:
    n = {"i": 0}

    def script(launch: Launch) -> FakeRun:
        n["i"] += 1
        return FakeRun(0.5, 1, error=ErrorInfo("RuntimeError", f"gloo failure {n['i']}"))

    sim = Sim(script=script)
    j = sim.submit(spec(pools=pools(), restart={"max_replica_restarts": 1, "max_job_retries": 0}))
    job = sim.run_until(j, {JobState.FAILED}, steps=2000)
    assert job.error is not None and "crash loop" not in job.error.message
    assert job.error.message.endswith("RuntimeError: gloo failure 2.")


def test_restart_counts_keep_their_history_across_attempts() -> None:
    sim = Sim(script=lambda launch: FakeRun(0.5, 3))
    j = sim.submit(spec(restart={"max_replica_restarts": 2, "max_job_retries": 1}))
    job = sim.run_until(j, {JobState.FAILED}, steps=2000)
    r = job.replicas[0]
    assert job.attempt == 2 and r.restarts == 2 and r.total_restarts == 4


def test_cancel_records_cancelled_by_user_not_a_recovered_failure() -> None:
    runs = iter([FakeRun(0.5, 1, error=PEER)])
    sim = Sim(script=lambda launch: next(runs, FakeRun()))
    j = sim.submit(spec())
    sim.run_until(j, {JobState.RUNNING})
    for _ in range(20):
        sim.step()
    assert sim.job(j).error is not None  # the recovered failure, while it runs
    sim.command("cancel", j)
    job = sim.run_until(j, {JobState.CANCELLED})
    assert job.error is not None and job.error.code is ErrorCode.CANCELLED
    assert job.error.message == "cancelled by user"
    assert "CANCELLED: cancelled by user" in sim.messages(j)


def test_after_the_primary_succeeds_the_others_get_their_pools_grace() -> None:
    sim = Sim(script=lambda launch: FakeRun(1, 0) if launch.replica == "worker-0" else FakeRun())
    j = sim.submit(spec(pools=pools(3, grace=7)))
    sim.run_until(j, {JobState.SUCCEEDED})
    stops = sim.backend.stops
    assert {s.delay for s in stops} == {7}  # SIGTERM only after the grace: they finish first
    messages = sim.messages(j)
    assert "worker-1 finished" in messages and "worker-2 finished" in messages
    assert not any("143" in m or "SIGTERM" in m for m in messages)


def test_counts_read_in_the_right_number() -> None:
    assert plural(1, "slot") == "1 slot" and plural(2, "slot") == "2 slots"
    assert all_of(1, "replica") == "the replica" and all_of(2, "replica") == "all 2 replicas"
    sim = Sim()
    j = sim.submit(spec())
    sim.run_until(j, {JobState.RUNNING})
    messages = sim.messages(j)
    assert "RUNNING: the replica started" in messages
    assert any(m.startswith("QUEUED: submitted to queue default (1 slot,") for m in messages)
    assert any(m.endswith("launching 1 replica on local") for m in messages)


def test_preempting_a_script_that_cannot_save_says_what_is_lost() -> None:
    sim = Sim(script=lambda launch: FakeRun())  # a stop kills it: it never saves (no exit 75)
    j = sim.submit(spec())
    sim.run_until(j, {JobState.RUNNING})
    for _ in range(30):
        sim.step()
    sim.command("preempt", j)
    for _ in range(50):
        sim.step()
    lost = [m for m in sim.messages(j) if "did not save" in m]
    assert len(lost) == 1, sim.messages(j)
    assert "(steps unknown: the script reports none) since it started, with no checkpoint" \
        in lost[0]
    seconds = float(lost[0].split("did not save: ")[1].split("s of work")[0])
    assert 2.5 <= seconds <= 4.0  # ~30 ticks of 0.1 s ran since RUNNING


def test_lost_work_counts_steps_since_the_last_checkpoint() -> None:
    from perdure.core.decide import lost_work
    from perdure.core.model import Job
    from perdure.core.replica import make_replicas

    s = spec()
    job = Job("j", s, "/w", 0.0, replicas=make_replicas(s), step=160, checkpoint_step=150,
              last_checkpoint=100.0, running_since=50.0)
    assert lost_work(job, 112.5) == (
        "12.5s of work (10 steps) since its last checkpoint (step 150) is lost")


def test_a_primary_that_finishes_as_the_preemption_notice_comes_succeeds() -> None:
    from perdure.core.events import ReplicaExited

    sim = Sim(script=lambda launch: FakeRun())
    j = sim.submit(spec(pools=pools(2)))
    sim.run_until(j, {JobState.RUNNING})
    sim.command("preempt", j)
    primary = sim.job(j).replicas[0].launch_id
    assert primary is not None
    sim.pending.append(ReplicaExited(primary, 0, sim.now + 0.05))  # done just after it
    job = sim.run_until(j, {JobState.SUCCEEDED, JobState.QUEUED, JobState.SUSPENDED})
    assert job.state is JobState.SUCCEEDED and job.attempt == 1
    assert not any("did not save" in m for m in sim.messages(j))
