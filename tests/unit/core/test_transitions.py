"""The lifecycle, transition by transition, on the pure core with a fake clock."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.helpers.sim import SETTINGS, Sim, spec

from perdure.backends.fake import FakeRun
from perdure.core.events import ErrorInfo, Launch, ReplicaExited
from perdure.core.states import ErrorCode, JobState, NodeState, ReplicaState


def pools(replicas: int = 1, slots: int = 1, **extra: object) -> list[dict[str, object]]:
    return [{"name": "worker", "replicas": replicas, "slots": slots, "command": ["python", "t.py"],
             **extra}]


def test_launches_every_replica_in_one_tick_and_runs() -> None:
    sim = Sim(script=lambda launch: FakeRun())
    j = sim.submit(spec(pools=pools(4)))
    out = sim.step()
    launches = [d for d in out.decisions if isinstance(d, Launch)]
    assert len(launches) == 4
    assert sim.job(j).state is JobState.PENDING
    sim.step()
    assert sim.job(j).state is JobState.RUNNING
    ports = {d.env["MASTER_PORT"] for d in launches}
    assert len(ports) == 1
    env = launches[2].env
    assert env["RANK"] == "2" and env["WORLD_SIZE"] == "4" and env["LOCAL_RANK"] == "2"
    assert env["PERDURE_REPLICA"] == "worker-2" and env["TORCHELASTIC_RESTART_COUNT"] == "0"
    assert launches[0].command[0] == SETTINGS.python


def test_exit_one_twice_then_zero_succeeds_with_two_restarts() -> None:
    runs = iter([FakeRun(1, 1), FakeRun(1, 1), FakeRun(1, 0)])
    sim = Sim(script=lambda launch: next(runs))
    j = sim.submit(spec())
    job = sim.run_until(j, {JobState.SUCCEEDED})
    assert job.replicas[0].restarts == 2 and job.attempt == 1
    assert any("restart 2 of 5" in m for m in sim.messages(j))


def test_always_exit_3_fails_after_5_restarts_and_4_attempts() -> None:
    sim = Sim(script=lambda launch: FakeRun(0.5, 3))
    j = sim.submit(spec())
    job = sim.run_until(j, {JobState.FAILED}, steps=2000)
    assert job.attempt == 4 and job.error is not None
    assert job.error.code is ErrorCode.USER_CODE
    launches = Counter(launch.env["PERDURE_ATTEMPT"] for launch in sim.backend.launched)
    assert launches == {"1": 6, "2": 6, "3": 6, "4": 6}


def test_transient_exit_retries_the_job_not_the_replica() -> None:
    runs = iter([FakeRun(1, 134, signal=6), FakeRun(1, 0)])
    sim = Sim(script=lambda launch: next(runs))
    j = sim.submit(spec())
    job = sim.run_until(j, {JobState.SUCCEEDED})
    assert job.attempt == 2 and job.replicas[0].restarts == 0
    assert job.retries == {"USER_CODE": 1}


def test_oom_fails_at_once() -> None:
    sim = Sim(script=lambda launch: FakeRun(1, 137, signal=9, oom=True))
    j = sim.submit(spec(pools=pools(2)))
    job = sim.run_until(j, {JobState.FAILED})
    assert job.error is not None and job.error.code is ErrorCode.OUT_OF_MEMORY
    assert job.attempt == 1


def test_exception_fails_at_once_with_termination_reason() -> None:
    def script(launch: Launch) -> FakeRun:
        if launch.replica == "worker-1":
            return FakeRun(1, 1, error=ErrorInfo("ValueError", "bad shape"))
        return FakeRun()

    sim = Sim(script=script)
    j = sim.submit(spec(pools=pools(2)))
    job = sim.run_until(j, {JobState.FAILED})
    assert job.error is not None
    assert job.error.message.endswith("Termination reason: ValueError: bad shape.")
    assert all(not r.alive for r in job.replicas)


def test_primary_success_stops_the_others() -> None:
    sim = Sim(script=lambda launch: FakeRun(1, 0) if launch.replica == "worker-0" else FakeRun())
    j = sim.submit(spec(pools=pools(3)))
    job = sim.run_until(j, {JobState.SUCCEEDED})
    stopped = {s.launch_id.split(".")[2] for s in sim.backend.stops}
    assert stopped == {"worker-1", "worker-2"}
    assert job.error is None


def test_group_restart_relaunches_all_with_a_new_port_and_counts_one_restart() -> None:
    first = {"n": 0}

    def script(launch: Launch) -> FakeRun:
        if launch.replica == "worker-2" and first["n"] == 0:
            first["n"] = 1
            return FakeRun(1, 1)
        return FakeRun()

    sim = Sim(script=script)
    j = sim.submit(spec(pools=pools(4)))
    sim.run_until(j, {JobState.RUNNING})
    for _ in range(15):
        sim.step()
    job = sim.job(j)
    assert job.state is JobState.RUNNING and job.round == 1
    assert [r.restarts for r in job.replicas] == [0, 0, 1, 0]
    ports = {launch.env["MASTER_PORT"] for launch in sim.backend.launched}
    assert len(ports) == 2 and len(sim.backend.launched) == 8


def test_replica_scope_restarts_only_the_failed_one() -> None:
    first = {"n": 0}

    def script(launch: Launch) -> FakeRun:
        if launch.replica == "worker-1" and first["n"] == 0:
            first["n"] = 1
            return FakeRun(1, 1)
        return FakeRun()

    sim = Sim(script=script)
    j = sim.submit(spec(pools=pools(3), restart={"scope": "replica"}))
    sim.run_until(j, {JobState.RUNNING})
    for _ in range(15):
        sim.step()
    assert len(sim.backend.launched) == 4 and not sim.backend.stops


def test_quota_queues_the_second_job_until_the_first_ends() -> None:
    sim = Sim(nodes={"a": 4, "b": 4}, quotas={"default": 4},
              script=lambda launch: FakeRun(2, 0))
    a = sim.submit(spec(name="a", pools=pools(3)))
    b = sim.submit(spec(name="b", pools=pools(3)))
    sim.step()
    assert sim.job(a).state is JobState.PENDING and sim.job(b).state is JobState.QUEUED
    assert any("waiting for quota" in m for m in sim.messages(b))
    sim.run_until(a, {JobState.SUCCEEDED})
    sim.run_until(b, {JobState.PENDING, JobState.RUNNING})


def test_priority_then_age_decides_admission() -> None:
    sim = Sim(nodes={"a": 2}, script=lambda launch: FakeRun(1, 0))
    blocker = sim.submit(spec(name="blocker", pools=pools(2)))
    sim.step()
    low = sim.submit(spec(name="low", pools=pools(2)))
    high = sim.submit(spec(name="high", priority=10, pools=pools(2)))
    sim.run_until(blocker, {JobState.SUCCEEDED})
    sim.step()
    assert sim.job(high).state in (JobState.PENDING, JobState.RUNNING)
    assert sim.job(low).state is JobState.QUEUED


def test_job_larger_than_cluster_fails_insufficient_capacity_after_retries() -> None:
    sim = Sim(nodes={"a": 2, "b": 2})
    j = sim.submit(spec(pools=pools(3, slots=2), scheduling={"placement_timeout_seconds": 1}))
    job = sim.run_until(j, {JobState.FAILED}, steps=100)
    assert job.error is not None and job.error.code is ErrorCode.INSUFFICIENT_CAPACITY
    assert job.error.message == (
        "Resources are insufficient in pool worker: need 6 slots, 4 healthy. "
        "Try fewer replicas or slots."
    )
    assert job.retries == {"INSUFFICIENT_CAPACITY": 3}
    assert not sim.backend.launched


def test_drain_moves_the_replica_keeps_identity_counts_no_restart() -> None:
    sim = Sim(nodes={"a": 2, "b": 2})
    j = sim.submit(spec(pools=pools(2)))
    job = sim.run_until(j, {JobState.RUNNING})
    node = job.replicas[0].node
    assert node is not None
    sim.command("drain-node", node)
    for _ in range(10):
        sim.step()
    job = sim.job(j)
    assert job.state is JobState.RUNNING
    assert all(r.node != node and r.restarts == 0 for r in job.replicas)
    assert [r.name for r in job.replicas] == ["worker-0", "worker-1"]
    assert sim.snap.nodes[node].state is NodeState.DRAINED


def test_node_failure_restarts_elsewhere_and_spends_no_restart() -> None:
    sim = Sim(nodes={"a": 2, "b": 2})
    j = sim.submit(spec(pools=pools(2)))
    job = sim.run_until(j, {JobState.RUNNING})
    node = job.replicas[0].node
    assert node is not None
    sim.command("fail-node", node)
    for _ in range(10):
        sim.step()
    job = sim.job(j)
    other = "b" if node == "a" else "a"
    assert job.state is JobState.RUNNING
    assert all(r.node == other for r in job.replicas)
    # one group restart, and a lost node spends no replica's restart budget
    assert sum(r.restarts for r in job.replicas) == 0
    assert any("node lost, restarted elsewhere (no restart counted)" in m
               for m in sim.messages(j))
    assert sim.snap.nodes[node].state is NodeState.DOWN


def test_launch_failure_is_internal_and_retried_three_times_in_all() -> None:
    sim = Sim(script=lambda launch: FakeRun(fail_launch=True))
    j = sim.submit(spec())
    job = sim.run_until(j, {JobState.FAILED})
    assert job.error is not None and job.error.code is ErrorCode.INTERNAL
    assert job.attempt == 3


def test_cancel_running_and_queued() -> None:
    sim = Sim(nodes={"a": 1})
    a = sim.submit(spec(name="a"))
    b = sim.submit(spec(name="b"))
    sim.run_until(a, {JobState.RUNNING})
    sim.command("cancel", b)
    sim.command("cancel", a)
    sim.step()
    assert sim.job(b).state is JobState.CANCELLED
    assert sim.job(a).state is JobState.CANCELLING
    sim.run_until(a, {JobState.CANCELLED})


def test_preempt_suspends_requeues_and_spends_nothing() -> None:
    sim = Sim()
    j = sim.submit(spec(pools=pools(2)))
    sim.run_until(j, {JobState.RUNNING})
    sim.command("preempt", j, hold=True)
    sim.step()
    assert sim.job(j).state is JobState.SUSPENDING
    job = sim.run_until(j, {JobState.SUSPENDED})
    assert job.retries == {} and all(r.restarts == 0 for r in job.replicas)
    assert all(s.grace == 30 for s in sim.backend.stops)
    sim.command("resume", j)
    job = sim.run_until(j, {JobState.RUNNING})
    assert job.attempt == 2


def test_decide_never_mutates_its_input() -> None:
    sim = Sim(script=lambda launch: FakeRun(1, 1))
    j = sim.submit(spec(pools=pools(2)))
    sim.run_until(j, {JobState.RUNNING})
    before = sim.snap.jobs[j].to_json()
    snap = sim.snap
    sim.now += 2
    sim.step()
    assert snap.jobs[j].to_json() == before
    assert sim.job(j).replicas[0].state is not ReplicaState.RUNNING or sim.job(j).round > 0


def test_node_preemption_suspends_and_requeues_elsewhere() -> None:
    sim = Sim(nodes={"a": 2, "b": 2})
    j = sim.submit(spec(pools=pools(2)))
    job = sim.run_until(j, {JobState.RUNNING})
    node = job.replicas[0].node
    assert node is not None
    sim.command("preempt-node", node)
    sim.step()
    assert sim.job(j).state is JobState.SUSPENDING
    job = sim.run_until(j, {JobState.RUNNING})
    assert job.attempt == 2 and all(r.node != node for r in job.replicas)
    assert job.retries == {} and any("SUSPENDED" in m for m in sim.messages(j))


def test_exit_75_without_notice_suspends_the_job() -> None:
    runs = iter([FakeRun(1, 75), FakeRun()])
    sim = Sim(script=lambda launch: next(runs, FakeRun()))
    j = sim.submit(spec())
    sim.run_until(j, {JobState.RUNNING})
    for _ in range(30):
        sim.step()
    job = sim.job(j)
    assert job.state is JobState.RUNNING and job.attempt == 2 and job.retries == {}
    assert any(m.startswith("SUSPENDED") for m in sim.messages(j))


def test_hot_swap_preempts_the_lower_priority_job() -> None:
    sim = Sim(nodes={"a": 2, "b": 2})
    high = sim.submit(spec(name="high", priority=10, pools=pools(2)))
    sim.run_until(high, {JobState.RUNNING})
    low = sim.submit(spec(name="low", priority=1, pools=pools(2)))
    sim.run_until(low, {JobState.RUNNING})
    node = sim.job(high).replicas[0].node
    assert node is not None and sim.job(low).replicas[0].node != node
    sim.command("fail-node", node)
    for _ in range(20):
        sim.step()
    assert sim.job(high).state is JobState.RUNNING
    assert all(r.node != node for r in sim.job(high).replicas)
    assert sim.job(low).state is JobState.QUEUED  # suspended, requeued, waiting for capacity
    msgs = sim.messages(high)
    assert any(f"hot-swap: preempting {low}" in m for m in msgs)
    assert any(f"hot-swap: capacity goes to {high}" in m for m in sim.messages(low))
    assert sim.job(low).retries == {} and all(s.grace == 30 for s in sim.backend.stops
                                              if s.launch_id.startswith(low))


def test_no_hot_swap_against_equal_or_higher_priority() -> None:
    sim = Sim(nodes={"a": 2, "b": 2})
    first = sim.submit(spec(name="first", priority=5, pools=pools(2),
                            scheduling={"placement_timeout_seconds": 2}))
    sim.run_until(first, {JobState.RUNNING})
    other = sim.submit(spec(name="other", priority=5, pools=pools(2)))
    sim.run_until(other, {JobState.RUNNING})
    node = sim.job(first).replicas[0].node
    assert node is not None
    sim.command("fail-node", node)
    sim.run_until(first, {JobState.QUEUED})  # capacity timeout: a job retry, no preemption
    assert sim.job(other).state is JobState.RUNNING
    assert sim.job(first).retries == {"INSUFFICIENT_CAPACITY": 1}



def peer_exit_seen_first(**culprit: Any) -> tuple[Sim, str]:
    """A 4-replica job whose worker-2 dies (`culprit`: its exit) while worker-0's "connection
    closed by peer" exit, which came just after, is seen one tick before worker-2's."""
    sim = Sim()
    j = sim.submit(spec(pools=pools(4)))
    sim.run_until(j, {JobState.RUNNING})
    ids = {r.name: str(r.launch_id) for r in sim.job(j).replicas}
    died = sim.now - 0.02
    for name in ("worker-0", "worker-2"):  # their exits are reported by hand
        sim.backend.procs.pop(ids[name])
    peer = ErrorInfo("RuntimeError", "[gloo] Connection closed by peer [127.0.0.1]:41234")
    sim.pending.append(ReplicaExited(ids["worker-0"], 1, died + 0.01, error=peer))
    sim.step()
    assert [r.restarts for r in sim.job(j).replicas] == [1, 0, 0, 0]
    sim.pending.append(ReplicaExited(ids["worker-2"], 137, died, signal=9, **culprit))
    return sim, j


def test_a_failure_reported_after_its_peers_collateral_exit_takes_the_restart() -> None:
    sim, j = peer_exit_seen_first()
    job = sim.run_until(j, {JobState.RUNNING})
    assert [r.restarts for r in job.replicas] == [0, 0, 1, 0]
    assert job.round == 1  # still one group restart
    assert any("worker-0's restart is not counted" in m for m in sim.messages(j))


def test_an_oom_reported_after_its_peers_collateral_exit_fails_the_job() -> None:
    sim, j = peer_exit_seen_first(oom=True)
    job = sim.run_until(j, {JobState.FAILED})
    assert job.error is not None and job.error.code is ErrorCode.OUT_OF_MEMORY


def test_a_survivor_stopped_for_the_new_round_takes_no_charge() -> None:
    sim = Sim()
    j = sim.submit(spec(pools=pools(3)))
    sim.run_until(j, {JobState.RUNNING})
    ids = {r.name: r.launch_id for r in sim.job(j).replicas}
    sim.backend.procs.pop(str(ids["worker-1"]))
    peer = ErrorInfo("DistBackendError", "[gloo] Connection closed by peer")
    sim.pending.append(ReplicaExited(str(ids["worker-1"]), 1, sim.now, error=peer))
    job = sim.run_until(j, {JobState.RUNNING})  # the others exit 143 after the stop
    assert [r.restarts for r in job.replicas] == [0, 1, 0]


def test_a_lost_peer_exit_seen_before_its_node_is_lost_spends_no_restart() -> None:
    """A host dies: its peers' gloo exits come in milliseconds, the node's loss seconds later
    (a Ray node's health check), while its replicas still have not answered the stop."""
    sim = Sim(nodes={"a": 2, "b": 2, "c": 2})
    j = sim.submit(spec(pools=pools(4)))
    job = sim.run_until(j, {JobState.RUNNING})
    ids = {r.name: str(r.launch_id) for r in job.replicas}
    lost = str(job.replicas[0].node)  # rank 0's host dies
    on_lost = [r.name for r in job.replicas if r.node == lost]
    survivor = next(r.name for r in job.replicas if r.node != lost)
    for name in [*on_lost, survivor]:  # a dead host answers nothing; the survivor is reported
        sim.backend.procs.pop(ids[name])
    peer = ErrorInfo("RuntimeError", "[gloo] Connection closed by peer [10.0.0.3]:41234")
    sim.pending.append(ReplicaExited(ids[survivor], 1, sim.now, error=peer))
    sim.step()
    assert sum(r.restarts for r in sim.job(j).replicas) == 1
    sim.step()  # the other survivor exits on its stop and both are launched again, towards
    # rank 0 on the lost node; the lost ones do not answer
    assert {r.state for r in sim.job(j).replicas if r.node != lost} <= {
        ReplicaState.STARTING, ReplicaState.RUNNING}
    sim.command("fail-node", lost)
    sim.pending.extend(ReplicaExited(ids[n], 137, sim.now, signal=9) for n in on_lost)
    launches = [d for _ in range(5) for d in sim.step().decisions if isinstance(d, Launch)]
    job = sim.job(j)
    assert [r.restarts for r in job.replicas] == [0, 0, 0, 0]
    assert any(f"{survivor}'s restart is not counted" in m for m in sim.messages(j))
    # The node's loss makes a new round, in which every replica is told rank 0's new node.
    assert job.round == 2 and all(r.node != lost for r in job.replicas)
    last = {d.replica: d for d in launches}
    assert sorted(last) == [r.name for r in job.replicas]
    assert {d.env["PERDURE_MASTER_NODE"] for d in last.values()} == {str(job.replicas[0].node)}


def test_a_node_lost_long_after_a_group_restart_gives_nothing_back() -> None:
    sim = Sim(nodes={"a": 2, "b": 2})
    j = sim.submit(spec(pools=pools(4)))
    job = sim.run_until(j, {JobState.RUNNING})
    ids = {r.name: str(r.launch_id) for r in job.replicas}
    survivor = next(r.name for r in job.replicas if r.node == "a")
    sim.backend.procs.pop(ids[survivor])
    peer = ErrorInfo("RuntimeError", "[gloo] Connection closed by peer [10.0.0.3]:41234")
    sim.pending.append(ReplicaExited(ids[survivor], 1, sim.now, error=peer))
    job = sim.run_until(j, {JobState.RUNNING})  # the round is over: everyone relaunched
    assert sum(r.restarts for r in job.replicas) == 1
    sim.command("fail-node", "b")
    for _ in range(5):
        sim.step()
    assert sum(r.restarts for r in sim.job(j).replicas) == 1
