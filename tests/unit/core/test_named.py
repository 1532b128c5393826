"""`Job.named`: the replicas of some names, in rank order, found by rank when they are few;
the same replicas a pass over the job picks, whatever the names and the job's order."""

from __future__ import annotations

import random

import pytest

from perdure.core.model import Job, make_replicas
from perdure.core.spec import JobSpec


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
