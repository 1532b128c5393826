"""The torchrun layout of a job, built in bulk passes, equals the layout built one replica at
a time, for random jobs, placements, plans and member lists."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from perdure.core.layout import Layout
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec


def one_by_one(job: Job, where: dict[str, str]) -> tuple[object, ...]:
    """Layout.of's mappings, each replica in turn (how it was built before)."""
    pools = {p.name: p for p in job.spec.pools}
    at = {x.name: x.node for x in job.replicas}
    at.update(where)
    local: dict[str, tuple[int, int]] = {}
    if any(p.procs_per_replica > 1 or p.gpus for p in job.spec.pools):
        local = {x.name: (0, pools[x.pool].procs_per_replica) for x in job.replicas}
        group = {x.name: x.rank for x in job.replicas}
        groups = len(job.replicas)
    else:
        counts = Counter(n for n in at.values() if n is not None)
        seen = dict.fromkeys(counts, 0)
        for name, node in at.items():
            if node is not None:
                local[name] = (seen[node], counts[node])
                seen[node] += 1
        order = {node: i for i, node in enumerate(counts)}
        group = {name: order.get(node, 0) for name, node in at.items()}  # type: ignore[arg-type]
        groups = max(1, len(counts))
    sizes: dict[str, int] = {}  # replicas of each pool so far
    first: dict[str, tuple[int, int]] = {}
    start = 0
    for x in job.replicas:
        k = pools[x.pool].procs_per_replica
        done = sizes.get(x.pool, 0)
        first[x.name] = (start, done * k)
        sizes[x.pool] = done + 1
        start += k
    members = {n: i for i, n in enumerate(job.members)}
    return local, group, groups, members, first, start


def seen(layout: Layout, job: Job) -> tuple[object, ...]:
    """What launches get of `layout`, as `one_by_one` builds it."""
    envs = {r.name: layout.env(r) for r in job.replicas}
    local = {n: (int(e["LOCAL_RANK"]), int(e["LOCAL_WORLD_SIZE"])) for n, e in envs.items()
             if layout.own_group is not None or layout.at[n] is not None}
    group = {n: int(e["GROUP_RANK"]) for n, e in envs.items()}
    groups = int(next(iter(envs.values()))["GROUP_WORLD_SIZE"])
    return local, group, groups, layout.member_rank, layout.first_rank, layout.world


@pytest.mark.parametrize("seed", range(300))
def test_bulk_layout_equals_one_replica_at_a_time(seed: int) -> None:
    rng = random.Random(seed)
    pools = [{"name": f"p{i}", "replicas": rng.randint(1, 9),
              "procs_per_replica": rng.choice([1, 1, 1, 2]), "gpus": rng.choice([0, 0, 0, 2]),
              "command": ["python", "t.py"]} for i in range(rng.randint(1, 3))]
    if rng.random() < 0.3:  # elastic (one process per replica)
        pools = [{**p, "min_replicas": 1, "procs_per_replica": 1} for p in pools]
    spec = JobSpec.model_validate({"name": "j", "pools": pools})
    job = Job("j-1", spec, "/s", 0.0, replicas=make_replicas(spec))
    if rng.random() < 0.2:  # pools not side by side (not as make_replicas puts them)
        rng.shuffle(job.replicas)
    nodes = [f"n{i}" for i in range(rng.randint(1, 6))]
    side_by_side = rng.random() < 0.5
    for i, r in enumerate(job.replicas):
        if rng.random() < 0.8:
            r.node = nodes[i * len(nodes) // len(job.replicas)] if side_by_side else (
                rng.choice(nodes))
    where = {r.name: rng.choice(nodes) for r in job.replicas if rng.random() < 0.2}
    job.members = [r.name for r in job.replicas if rng.random() < 0.7]
    rng.shuffle(job.members)
    plan: tuple[tuple[int, str, tuple[int, ...]], ...] = ()
    if rng.random() < 0.5:  # a plan (places in rank order): all of the job, or some
        every = rng.random() < 0.5
        plan = tuple((i, rng.choice(nodes), ()) for i in range(len(job.replicas))
                     if every or rng.random() < 0.3)
    planned = {job.replicas[i].name: node for i, node, _ in plan}  # over `where`
    layout = Layout.of(job, where, plan)
    assert seen(layout, job) == one_by_one(job, {**where, **planned})


@pytest.mark.parametrize("seed", range(200))
def test_a_layout_kept_over_moves_and_rounds_equals_one_built_anew(seed: int) -> None:
    """A replacement placed on another node moves only its nodes' entries, and a new
    elastic round renumbers the members only (core.tick, core.elastic): each equals the
    layout built anew, replica by replica, at every step of a random sequence."""
    rng = random.Random(seed)
    own_groups = rng.random() < 0.2  # several processes a replica: each its own group
    pools = [{"name": f"p{i}", "replicas": rng.randint(1, 9),
              **({"procs_per_replica": 2} if own_groups else {"min_replicas": 1}),
              "command": ["python", "t.py"]} for i in range(rng.randint(1, 3))]
    spec = JobSpec.model_validate({"name": "j", "pools": pools})
    job = Job("j-1", spec, "/s", 0.0, replicas=make_replicas(spec))
    if rng.random() < 0.2:
        rng.shuffle(job.replicas)
    names = [f"n{i}" for i in range(rng.randint(1, 7))]
    for i, r in enumerate(job.replicas):
        r.node = names[i * len(names) // len(job.replicas)] if rng.random() < 0.9 else None
    job.members = tuple(r.name for r in job.replicas)
    layout = Layout.of(job)
    for _ in range(6):
        if rng.random() < 0.4:
            job.round += 1
            job.members = tuple(rng.sample(job.members, rng.randint(1, len(job.members))))
            layout = layout.renumbered(job)
        else:
            where = {r.name: rng.choice(names) for r in rng.sample(job.replicas, rng.randint(
                1, min(3, len(job.replicas))))}
            layout = layout.moved(job, where)
            for r in job.replicas:  # launched there
                r.node = where.get(r.name, r.node)
        fresh = Layout.of(job)
        assert seen(layout, job) == one_by_one(job, {})
        assert [layout.env(r) for r in job.replicas] == [fresh.env(r) for r in job.replicas]
        assert layout.key == fresh.key
