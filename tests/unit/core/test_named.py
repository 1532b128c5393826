"""`Job.named` and `Job.unplaced`: replicas picked in C passes or by rank; the same replicas
a plain pass over the job picks, whatever the names, states, plan and the job's order."""

from __future__ import annotations

import random

import pytest

from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec
from perdure.core.states import ReplicaState


@pytest.mark.parametrize("seed", range(40))
def test_named_picks_what_a_pass_picks(seed: int) -> None:
    rng = random.Random(seed)
    spec = JobSpec.model_validate({"name": "j", "pools": [
        {"name": "a", "replicas": rng.randint(1, 40), "command": ["x"]},
        {"name": "b", "replicas": rng.randint(1, 60), "command": ["x"]}]})
    job = Job("j-0", spec, "/tmp", 0.0, replicas=make_replicas(spec))
    if seed % 3 == 0:  # replicas not at their rank's place (rank order kept)
        job.replicas = job.replicas[1:]
    names = [r.name for r in rng.sample(job.replicas, rng.randint(0, len(job.replicas)))]
    if seed % 4 == 0:
        names.append(rng.choice(["a-999", "zz-1", "a-x", "b"]))  # no such replica
    wanted = {n: "node" for n in names}
    assert job.named(wanted) == [r for r in job.replicas if r.name in wanted]


@pytest.mark.parametrize("seed", range(80))
def test_unplaced_are_the_waiting_not_planned(seed: int) -> None:
    """Also in a tick's copy, where the replicas it changed are looked at first."""
    rng = random.Random(seed)
    spec = JobSpec.model_validate({"name": "j", "pools": [
        {"name": "a", "replicas": rng.randint(1, 80), "command": ["x"]}]})
    job = Job("j-0", spec, "/tmp", 0.0, replicas=make_replicas(spec))
    for r in job.replicas:
        r.state = rng.choice(list(ReplicaState) if seed % 3 else [ReplicaState.RUNNING])
    if seed % 2:  # a tick's copy: it changes some replicas (owned), some to WAITING
        job.seal()
        job = job.clone()
        for r in rng.sample(job.replicas, rng.randint(0, len(job.replicas))):
            job.own(r).state = rng.choice([ReplicaState.WAITING, ReplicaState.EXITED])
    waiting = [r.rank for r in job.replicas if r.state is ReplicaState.WAITING]
    job.scratch.plan = tuple((rank, "n", ()) for rank in sorted(rng.sample(waiting, rng.randint(
        0, len(waiting)))))
    planned = {rank for rank, _, _ in job.scratch.plan}
    assert job.unplaced() == [r for r in job.replicas
                              if r.state is ReplicaState.WAITING and r.rank not in planned]
