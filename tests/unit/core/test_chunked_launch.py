"""A tick sends at most `launches_per_tick` launches and stops (a 16,384-replica job's ticks
stay short): the rest of a placement is sent by the next ticks, holding its slots and with
the layout of the whole placement; the rest of a group restart's stops likewise. Small jobs
are sent in one tick, as before."""

from __future__ import annotations

import dataclasses

from tests.helpers.sim import SETTINGS, Sim, spec

from perdure.core.events import Launch, Rendezvous
from perdure.core.model import Job
from perdure.core.states import JobState, ReplicaState

LAYOUT_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
              "GROUP_WORLD_SIZE", "MASTER_PORT", "PERDURE_MASTER_NODE", "PERDURE_ROUND",
              "PERDURE_NODE")


def chunked(per_tick: int | None, nodes: str = "abc") -> tuple[Sim, str]:
    """A job of 10 one-slot replicas on nodes of 4 slots."""
    s = Sim(nodes={n: 4 for n in nodes},
            settings=dataclasses.replace(SETTINGS, launches_per_tick=per_tick))
    pools = [{"name": "w", "replicas": 10, "command": ["python", "t.py"]}]
    return s, s.submit(spec(pools=pools))


def layout(launches: list[Launch]) -> dict[str, tuple[str, ...]]:
    return {x.replica: tuple(x.env.get(k, "") for k in LAYOUT_ENV) for x in launches}


def test_a_big_placement_is_sent_over_ticks_with_the_layout_of_one() -> None:
    whole, j = chunked(None)
    whole.step()
    assert len(whole.backend.launched) == 10  # one tick, as every job before

    sim, j = chunked(4)
    sent = []
    for _ in range(4):
        sim.step()
        sent.append(len(sim.backend.launched))
    assert sent == [0, 4, 8, 10]  # placed; its layout built and the first sent the next tick
    assert [x.replica for x in sim.backend.launched] == [f"w-{i}" for i in range(10)]
    assert layout(sim.backend.launched) == layout(whole.backend.launched)
    job = sim.run_until(j, {JobState.RUNNING})
    assert job.unlaunched == 0 and not job.scratch.plan


def test_planned_replicas_hold_their_slots() -> None:
    sim, j = chunked(4)
    sim.step()  # 4 sent, 6 planned: the 12 slots are the job's except 2
    assert sim.job(j).used_slots() == {"a": 4, "b": 4, "c": 2}
    other = sim.submit(spec(name="other", pools=[
        {"name": "w", "replicas": 3, "command": ["python", "t.py"]}]))
    for _ in range(3):
        sim.step()
    assert sim.job(other).state is JobState.QUEUED  # 2 slots free, not the planned ones
    assert len([x for x in sim.backend.launched if x.job_id == j]) == 10


def test_a_group_restart_stops_over_ticks_and_runs_once_all_are_back() -> None:
    sim, j = chunked(4)
    job = sim.run_until(j, {JobState.RUNNING})
    victim = job.replicas[7]
    assert victim.launch_id is not None
    sim.backend.kill(victim.launch_id)
    sim.step()  # the restart: 4 stops now, the other 5 later
    job = sim.job(j)
    assert job.state is JobState.PENDING and len(sim.backend.stops) == 4
    assert len(job.unstopped) == 5
    peer = job.replicas[job.unstopped[0]]
    assert peer.launch_id is not None and peer.state is ReplicaState.RUNNING
    sim.backend.kill(peer.launch_id)  # its peers died: an exit the restart asked for
    job = sim.run_until(j, {JobState.RUNNING})
    assert job.round == 1 and not job.unstopped
    assert [r.restarts for r in job.replicas] == [1 if r.rank == 7 else 0
                                                  for r in job.replicas]
    assert {r.state for r in job.replicas} == {ReplicaState.RUNNING}
    assert len(sim.backend.procs) == 10  # one process per replica, none of the old round
    assert not any("round 2" in m for m in sim.messages(j))


def test_a_controller_that_died_mid_plan_restarts_the_round() -> None:
    sim, j = chunked(4)
    sim.step()  # placed
    sim.step()  # the first 4 sent
    stored = sim.job(j).to_json()  # what the store holds: the count, not the plan
    assert stored["unlaunched"] == 6
    job = Job.from_json(stored, sim.job(j).spec)
    assert not job.scratch.plan
    sim.snap = dataclasses.replace(sim.snap, jobs={j: job}, index=None)
    job = sim.run_until(j, {JobState.RUNNING})
    assert job.round == 1 and job.unlaunched == 0
    assert any("6 launches of round 0 not sent: the controller restarted" in m
               for m in sim.messages(j))
    assert {r.state for r in job.replicas} == {ReplicaState.RUNNING}
    assert len(sim.backend.procs) == 10


def test_a_planned_node_lost_before_its_launch_replans() -> None:
    sim, j = chunked(4, nodes="abcd")
    sim.step()  # w-0..3 on a; w-4..7 planned on b, w-8, w-9 on c
    sim.command("fail-node", "b")
    job = sim.run_until(j, {JobState.RUNNING})
    assert all(r.node != "b" for r in job.replicas)
    assert any("node b is no longer ready" in m for m in sim.messages(j))


def test_an_elastic_replacement_is_launched_in_the_tick_that_places_it() -> None:
    """A big elastic job keeps its layout over its rounds: a lost node's replacements move
    only their nodes' entries and are sent at once (the tick after, when the layout was
    built anew), with the layout a job sent all at once gets."""
    launched = {}
    for per_tick in (None, 4):
        sim = Sim(nodes={n: 4 for n in "abcd"},
                  settings=dataclasses.replace(SETTINGS, launches_per_tick=per_tick))
        j = sim.submit(spec(pools=[{"name": "w", "replicas": 10, "min_replicas": 5,
                                    "command": ["python", "t.py"]}]))
        sim.run_until(j, {JobState.RUNNING})
        before = len(sim.backend.launched)
        sim.command("fail-node", "c")  # w-8, w-9: the job shrinks, their replacements go to d
        for _ in range(5):
            out = sim.step()
            if any(isinstance(d, Rendezvous) for d in out.decisions):
                break
        sent = [d for d in out.decisions if isinstance(d, Launch)]
        assert [(x.replica, x.node) for x in sent] == [("w-8", "d"), ("w-9", "d")]
        launched[per_tick] = layout(sim.backend.launched[before:])
    assert launched[4] == launched[None]
