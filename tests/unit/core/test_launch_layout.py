"""Replicas launched together share their pool's environment (computed once per launch of a
job): each Launch is the one built for that replica alone, torchrun's contract included, for
CPU, GPU, multi-pool and elastic jobs and for a state dir with or without a trailing slash."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from perdure.core.launchenv import LaunchSettings, build_launch
from perdure.core.layout import Layout, gpu_env
from perdure.core.model import Job
from perdure.core.records import Node
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec

NODES = {"a": Node("a", 8, gpus=4), "b": Node("b", 8, gpus=4, gpu_ids=("7", "6", "5", "4"))}


def placed(pools: list[dict[str, Any]], **fields: Any) -> Job:
    spec = JobSpec.model_validate({"name": "j", "env": {"LOCAL_RANK": "user", "A": "1"},
                                   "pools": pools, **fields})
    job = Job(id="j-1", spec=spec, spec_dir="/s", created=0.0, replicas=make_replicas(spec),
              attempt=2, round=1)
    for i, r in enumerate(job.replicas):
        r.node, r.restarts, r.launches = ("a", "b")[i % 2], i % 3, 1
        r.launch_id = f"j-1.2.{r.name}.1"
        r.devices = [i // 2 % 4] if r.gpus else []
    job.members = [r.name for r in job.replicas][::-1] if job.elastic else []
    return job


@pytest.mark.parametrize("job", [
    placed([{"name": "w", "replicas": 6, "command": ["python", "t.py"]}]),
    placed([{"name": "w", "replicas": 4, "gpus": 1, "command": ["python", "t.py"]},
            {"name": "p", "replicas": 2, "procs_per_replica": 2, "env": {"B": "2"},
             "command": ["/bin/run"]}]),
    placed([{"name": "w", "replicas": 6, "min_replicas": 2, "command": ["python", "t.py"]}],
           checkpoint={"every": "auto"}),
], ids=["cpu", "gpu-and-procs", "elastic"])
@pytest.mark.parametrize("state_dir", ["/st", "/st/", "/", "rel"])
def test_a_shared_layout_launches_each_replica_as_alone(job: Job, state_dir: str) -> None:
    settings = LaunchSettings(state_dir=state_dir, python="/py", node_dir="/dev/shm/p",
                              job_secret=lambda job_id: f"s-{job_id}")
    shared = dataclasses.replace(Layout.of(job), devices=gpu_env(job, NODES, job.replicas))
    for r in job.replicas:
        alone = build_launch(job, r, settings, dataclasses.replace(
            Layout.of(job), devices=gpu_env(job, NODES, [r])))
        assert build_launch(job, r, settings, shared) == alone
        assert alone.env["LOCAL_RANK"] != "user"  # the contract's names win over the spec's
        assert alone.env["PERDURE_REPORT_DIR"].endswith(f"launches/{r.launch_id}")
