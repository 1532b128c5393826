"""Elastic rounds on a big job are published, shrunk and grown in bulk passes (C: map,
compress, set algebra) with each round's member set kept across ticks (`Job.member_set`):
on random jobs (random states or mostly running ones, nodes, nodes down, launches planned
but not sent, ranks not in place order, a layout whose entries are stale for some replicas)
every round, pause, shrink and grow equals the one the plain per-replica loops of the
earlier version decide."""

from __future__ import annotations

import copy
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.sim import SETTINGS, spec

from perdure.core import elastic
from perdure.core.events import Rendezvous
from perdure.core.layout import Layout
from perdure.core.model import Job
from perdure.core.records import Node
from perdure.core.replica import Replica
from perdure.core.states import JobState, NodeState, ReplicaState
from perdure.core.tick import Snapshot, Tick

NODES = ["a", "b", "c", "d", "e"]
UP = {ReplicaState.STARTING, ReplicaState.RUNNING}


# ---- the plain loops (the version before the bulk passes), the reference -------------------

def ref_publish(t: Tick, job: Job, members: list[str], reason: str,
                where: dict[str, str] | None = None) -> None:
    at = {r.name: r.node or "" for r in job.replicas}
    at.update((job.replicas[rank].name, node) for rank, node, _ in job.scratch.plan)
    at.update(where or {})
    rank = {r.name: r.rank for r in job.replicas}
    job.members = tuple(sorted(members, key=lambda n: rank[n]))
    if reason != "admitted":
        job.round += 1
    t.decisions.append(Rendezvous(job.id, job.attempt, job.round,
                                  tuple((n, at[n]) for n in job.members), reason, t.now))


def down(t: Tick, node: str | None) -> bool:
    n = t.nodes.get(node or "")
    return n is not None and n.state is NodeState.DOWN


def ref_lose(t: Tick, job: Job, r: Replica, why: str) -> None:
    r = job.own(r)
    r.state, r.relaunch = ReplicaState.WAITING, False
    members = set(job.members)
    if r.name not in members:
        return
    together = [x for x in job.replicas if x is not r and x.node == r.node
                and x.name in members] if down(t, r.node) else []
    if job.spec.elastic.mode == "pause" and any(not x.alive for x in together):
        return
    lost = [r, *(x for x in together if x.alive)]
    gone = {x.name for x in lost}
    planned = {rank for rank, _, _ in job.scratch.plan}
    survivors = [x.name for x in job.replicas if x.name in members and x.name not in gone
                 and (x.state in UP or x.rank in planned)]
    before = len(job.members)
    if len(lost) > 1:
        why = f"{why}; with it on node {r.node}: {', '.join(x.name for x in lost[1:])}"
    if job.spec.elastic.mode == "resize" and len(survivors) >= job.min_members:
        ref_publish(t, job, survivors, f"shrink {before} -> {len(survivors)}: {why}")
        return
    job.state = JobState.PENDING
    ref_publish(t, job, list(job.members), f"pause at world size {before}: {why}; "
                                          f"waiting for {', '.join(x.name for x in lost)}")


def ref_joined(t: Tick, job: Job) -> None:
    if job.count(ReplicaState.STARTING) or len(job.members) == len(job.replicas):
        return
    members = set(job.members)
    new = [x.name for x in job.replicas if x.state is ReplicaState.RUNNING
           and x.name not in members and not down(t, x.node)]
    if not new:
        return
    joining = set(new)
    grown = [x.name for x in job.replicas if x.alive and (x.name in members or x.name in joining)]
    ref_publish(t, job, grown, f"grow {len(job.members)} -> {len(grown)}: {', '.join(new)} "
                               f"{'is' if len(new) == 1 else 'are'} up")


# ---- random jobs ------------------------------------------------------------------------

def random_tick(rng: random.Random) -> tuple[Tick, Job]:
    n = rng.randint(2, 40)
    mode = rng.choice(["resize", "pause"])
    job = Job("j", spec(pools=[{"name": "w", "replicas": n, "min_replicas": rng.randint(1, n),
                                "command": ["python", "t.py"]}], elastic={"mode": mode}),
              "/w", 0.0, state=JobState.RUNNING)
    job.replicas = [Replica(f"w-{i}", "w", i, i, 1) for i in range(n)]
    steady = rng.random() < 0.5  # mostly running, as a big job is (the counted fast paths)
    for r in job.replicas:
        r.state = (ReplicaState.RUNNING if steady and rng.random() < 0.9
                   else rng.choice(list(ReplicaState)))
        r.node = rng.choice([None, *NODES])
    layouts = {}
    if rng.random() < 0.5:  # a layout, its nodes' entries stale for some replicas
        layouts[job.id] = Layout.of(job)
        for r in rng.sample(job.replicas, rng.randint(0, min(3, n))):
            r.node = rng.choice([None, *NODES])
    if rng.random() < 0.2:  # ranks not in place order
        rng.shuffle(job.replicas)
    waiting = [i for i, r in enumerate(job.replicas) if r.state is ReplicaState.WAITING]
    job.scratch.plan = tuple((i, rng.choice(NODES), ()) for i in sorted(rng.sample(
        waiting, rng.randint(0, len(waiting)))))
    job.members = tuple(sorted((r.name for r in job.replicas if rng.random() < 0.8),
                               key=lambda name: int(name[2:])))
    job.round = rng.randint(0, 3)
    nodes = {x: Node(x, 8, rng.choice([NodeState.READY, NodeState.DOWN])) for x in NODES}
    snap = Snapshot({job.id: job}, nodes, {"default": None}, layouts=layouts)
    t = Tick(snap, 5.0, SETTINGS)
    return t, t.touch(job.id)  # type: ignore[return-value]


def same(t: Tick, job: Job, t2: Tick, job2: Job) -> None:
    assert [d for d in t.decisions if isinstance(d, Rendezvous)] == [
        d for d in t2.decisions if isinstance(d, Rendezvous)]
    assert (job.members, job.round, job.state) == (job2.members, job2.round, job2.state)
    assert job.member_set() == set(job2.members)


def twin(t: Tick, job: Job) -> tuple[Tick, Job]:
    t2 = copy.deepcopy(t)
    return t2, t2.jobs[job.id]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.integers(0, 2**32))
def test_publish_lose_and_grow_equal_the_plain_loops(seed: int) -> None:
    rng = random.Random(seed)
    t, job = random_tick(rng)
    t2, job2 = twin(t, job)
    names = [r.name for r in job.replicas]
    chosen = rng.sample(names, rng.randint(0, len(names)))
    where = {x: rng.choice(NODES) for x in rng.sample(names, rng.randint(0, 2))}
    elastic.publish(t, job, chosen, "admitted", where)
    ref_publish(t2, job2, chosen, "admitted", where)
    same(t, job, t2, job2)
    for _ in range(rng.randint(1, 6)):  # losses and grows on the same tick's copy
        if rng.random() < 0.6:
            k = rng.randrange(len(job.replicas))
            elastic.lose(t, job, job.replicas[k], "it exited")
            ref_lose(t2, job2, job2.replicas[k], "it exited")
        else:
            for r in rng.sample(job.replicas, rng.randint(0, min(3, len(job.replicas)))):
                k = job.replicas.index(r)
                for j in (job, job2):
                    j.own(j.replicas[k]).state = ReplicaState.RUNNING
            elastic.joined(t, job)
            ref_joined(t2, job2)
        same(t, job, t2, job2)


def test_member_set_is_kept_while_the_round_lasts_and_follows_each_new_round() -> None:
    t, job = random_tick(random.Random(7))
    first = job.member_set()
    assert first is job.clone().member_set()  # a later tick's copy shares it: not rebuilt
    elastic.publish(t, job, [r.name for r in job.replicas][:2], "shrink")
    assert job.member_set() == set(job.members) and len(job.members) == 2
