"""Spare nodes (`spares: K`): held by the attempt, a lost node's replicas placed on them at
once, another sought, all let go when the attempt ends."""

from __future__ import annotations

from tests.helpers.sim import Sim, spec

from perdure.core.events import Launch, NodeCheckFailed
from perdure.core.states import JobState


def spare_spec(spares: int = 1, **pool: object) -> object:
    return spec(pools=[{"name": "worker", "replicas": 2, "slots": 2, "spares": spares,
                        "command": ["python", "t.py"], **pool}])


def steps(sim: Sim, n: int = 5) -> None:
    for _ in range(n):
        sim.step()


def test_a_lost_node_is_replaced_by_the_spare_at_once() -> None:
    sim = Sim(nodes={"a": 2, "b": 2, "c": 2, "d": 2})
    j = sim.submit(spare_spec())  # type: ignore[arg-type]
    job = sim.run_until(j, {JobState.RUNNING})
    used = {r.node for r in job.replicas}
    assert len(job.spares) == 1 and not set(job.spares) & used
    spare = next(iter(job.spares))
    assert f"holding spare node {spare} (1 of 1)" in sim.messages(j)
    lost = job.replicas[1].node
    sim.command("fail-node", str(lost))
    before = len(sim.backend.launched)
    sim.step()  # the node's loss is seen
    sim.step()  # the replica's exit: replaced in the same tick
    launches = [d for d in sim.backend.launched[before:] if isinstance(d, Launch)]
    assert [(d.replica, d.node) for d in launches] == [("worker-1", spare)], launches
    job = sim.job(j)
    assert any(m.startswith(f"spare node {spare} took worker-1") for m in sim.messages(j))
    # the one free node left becomes the new spare
    free = ({"a", "b", "c", "d"} - {lost, spare} - {r.node for r in job.replicas}).pop()
    steps(sim)
    job = sim.job(j)
    assert job.spares == {free: 2} and job.state is JobState.RUNNING
    assert all(r.restarts == 0 for r in job.replicas)


def test_held_spares_are_capacity_other_jobs_wait_for() -> None:
    sim = Sim(nodes={"a": 2, "b": 2, "c": 2})
    j = sim.submit(spare_spec())  # type: ignore[arg-type]
    sim.run_until(j, {JobState.RUNNING})
    other = sim.submit(spec(pools=[{"name": "w", "slots": 2, "command": ["python", "t.py"]}]))
    steps(sim)
    assert sim.job(other).state is JobState.QUEUED
    sim.command("cancel", j)
    sim.run_until(j, {JobState.CANCELLED})
    job = sim.run_until(other, {JobState.RUNNING})
    assert job.state is JobState.RUNNING and sim.job(j).spares == {}


def test_without_a_free_node_the_job_runs_and_keeps_seeking() -> None:
    sim = Sim(nodes={"a": 2, "b": 2, "c": 2})
    sim.command("fail-node", "c")
    sim.step()
    j = sim.submit(spare_spec())  # type: ignore[arg-type]
    job = sim.run_until(j, {JobState.RUNNING})
    assert job.spares == {}  # no free node: it runs without its spare
    sim.command("restore-node", "c")
    steps(sim)
    assert sim.job(j).spares == {"c": 2}


def test_the_backend_is_told_which_spares_the_attempt_holds() -> None:
    """HoldNodes: the spare held with the admission, the set after one was used, none once
    the attempt ended (a Slurm allocation keeps exactly those)."""
    from perdure.core.events import HoldNodes

    sim = Sim(nodes={"a": 2, "b": 2, "c": 2, "d": 2})
    holds: list[HoldNodes] = []
    j = sim.submit(spare_spec())  # type: ignore[arg-type]
    for _ in range(5):
        holds += [d for d in sim.step().decisions if isinstance(d, HoldNodes)]
    job = sim.job(j)
    spare = next(iter(job.spares))
    assert holds == [HoldNodes(j, 1, (spare,))], holds
    sim.command("fail-node", str(job.replicas[1].node))
    for _ in range(5):
        holds += [d for d in sim.step().decisions if isinstance(d, HoldNodes)]
    job = sim.job(j)
    assert holds[-1] == HoldNodes(j, 1, tuple(sorted(job.spares))) and spare not in holds[-1].nodes
    sim.command("cancel", j)
    for _ in range(5):
        holds += [d for d in sim.step().decisions if isinstance(d, HoldNodes)]
    assert holds[-1] == HoldNodes(j, 1, ()), holds


def test_a_spare_whose_node_is_lost_or_quarantined_is_let_go_and_replaced() -> None:
    sim = Sim(nodes={"a": 2, "b": 2, "c": 2, "d": 2, "e": 2})
    j = sim.submit(spare_spec())  # type: ignore[arg-type]
    job = sim.run_until(j, {JobState.RUNNING})
    spare = next(iter(job.spares))
    sim.command("fail-node", spare)
    steps(sim)
    job = sim.job(j)
    assert spare not in job.spares and len(job.spares) == 1, job.spares
    assert f"spare node {spare} let go (DOWN); seeking another spare" in sim.messages(j)
    assert all(r.restarts == 0 for r in job.replicas)  # nothing of the job ran there
    # a quarantined spare (its preflight failed) goes the same way
    spare = next(iter(job.spares))
    sim.pending.append(NodeCheckFailed(spare, "FAIL memory: 12 MiB available", sim.now))
    steps(sim)
    job = sim.job(j)
    assert spare not in job.spares and len(job.spares) == 1, job.spares
    assert f"spare node {spare} let go (QUARANTINED); seeking another spare" in sim.messages(j)
