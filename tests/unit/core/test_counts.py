"""A tick's clone of a job keeps its replica counts (per state, slots per node, restarts) up
to date from the replicas it owns instead of counting all of them again (core.counts): the
counts kept that way always equal a full recount, through random changes and random ticks."""

from __future__ import annotations

import dataclasses
import random

import pytest
from tests.helpers.sim import SETTINGS, Sim, spec

from perdure.backends.fake import FakeRun
from perdure.core.counts import Counts
from perdure.core.events import Launch
from perdure.core.model import Job
from perdure.core.replica import Replica
from perdure.core.states import JobState, ReplicaState

STATES = list(ReplicaState)


def recount(replicas: list[Replica]) -> tuple[dict[str, int], dict[str, int], int]:
    """The counts, by a plain loop over every replica."""
    states: dict[str, int] = {}
    slots: dict[str, int] = {}
    restarts = 0
    for r in replicas:
        states[r.state.value] = states.get(r.state.value, 0) + 1
        if r.node is not None and r.state.alive:
            slots[r.node] = slots.get(r.node, 0) + r.slots
        restarts += r.restarts
    return states, slots, restarts


def as_pair(c: Counts) -> tuple[dict[str, int], dict[str, int], int]:
    return {s: n for s, n in c.states.items() if n}, c.slots, c.restarts


def scramble(rng: random.Random, r: Replica) -> None:
    r.state = rng.choice(STATES)
    r.node = rng.choice([None, "a", "b", "c", "d"])
    r.restarts = rng.randint(0, 5)


@pytest.mark.parametrize("seed", range(300))
def test_counts_kept_from_owned_replicas_equal_a_recount(seed: int) -> None:
    rng = random.Random(seed)
    pools = [{"name": f"p{i}", "replicas": rng.randint(1, 12), "slots": rng.randint(1, 3),
              "command": ["python", "t.py"]} for i in range(rng.randint(1, 3))]
    job = Job("j", spec(pools=pools), "/w", 0.0, state=JobState.RUNNING)
    job.replicas = [Replica(f"{p['name']}-{i}", str(p["name"]), i, 0, int(p["slots"]))  # type: ignore[call-overload]
                    for p in pools for i in range(int(p["replicas"]))]  # type: ignore[call-overload]
    for rank, r in enumerate(job.replicas):
        r.rank = rank
        scramble(rng, r)
    before = recount(job.replicas)
    for _tick in range(rng.randint(1, 4)):
        clone = job.clone()
        for _ in range(rng.randint(0, 3 * len(job.replicas))):
            op = rng.random()
            if op < 0.6:
                scramble(rng, clone.own(rng.choice(clone.replicas)))
            elif op < 0.65:
                for r in clone.own_all():
                    scramble(rng, r)
            else:
                assert as_pair(clone.counts()) == recount(clone.replicas)
                assert clone.used_slots() == recount(clone.replicas)[1]
        assert as_pair(clone.counts()) == recount(clone.replicas)
        assert recount(job.replicas) == before  # the job cloned is left as it was
        clone.seal()  # committed, as decide does
        assert as_pair(clone.counts()) == recount(clone.replicas)
        job, before = clone, recount(clone.replicas)
    scramble(rng, job.own(job.replicas[0]))  # changed outside a tick: counted again
    assert as_pair(job.counts()) == recount(job.replicas)


def exits(rng: random.Random) -> FakeRun:
    return FakeRun(seconds=rng.choice([None, None, 0.3, 0.7]),
                   exit_code=rng.choice([0, 1, 1, 137]))


@pytest.mark.parametrize("seed", range(12))
def test_counts_in_random_ticks_equal_a_recount(seed: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Every count decide asks for, in ticks of launches over several ticks, crashes,
    restarts, elastic rounds and a lost node, equals a recount of the replicas then."""
    rng = random.Random(seed)
    asked = []
    counts = Job.counts

    def checked(job: Job) -> Counts:
        got = counts(job)
        assert as_pair(got) == recount(job.replicas)
        asked.append(job.scratch.was is not None)
        return got

    monkeypatch.setattr(Job, "counts", checked)
    sim = Sim(nodes={n: 4 for n in "abcdef"}, script=lambda launch: exits(rng),
              settings=dataclasses.replace(SETTINGS, launches_per_tick=rng.choice([2, 3, 5])))
    pool = {"name": "w", "replicas": 9, "command": ["python", "t.py"]}
    elastic = {**pool, "min_replicas": 4}
    for p in (pool, elastic):
        sim.submit(spec(name=f"j{len(sim.snap.jobs)}", pools=[p],
                        restart={"max_replica_restarts": 50}))
    for i in range(120):
        sim.step(0.1)
        if i == 30:
            node = next((x.node for x in sim.backend.launched if isinstance(x, Launch)), "a")
            sim.command("fail-node", node)
    assert any(asked), "decide never asked a clone for its counts"
