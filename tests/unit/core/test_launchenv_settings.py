"""What a launch's environment carries from the spec's checkpoint settings and the shell's."""

from __future__ import annotations

from typing import Any

import pytest

from perdure.core.launchenv import LaunchSettings, build_launch
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec


def _env(checkpoint: dict[str, Any], **settings: Any) -> dict[str, str]:
    spec = JobSpec.model_validate({"name": "j", "checkpoint": checkpoint,
                                   "pools": [{"name": "w", "replicas": 2,
                                              "command": ["python", "t.py"]}]})
    job = Job(id="j-1", spec=spec, spec_dir="/s", created=0.0, replicas=make_replicas(spec))
    return dict(build_launch(job, job.replicas[1],
                             LaunchSettings(state_dir="/st", python="/py", **settings)).env)


@pytest.mark.parametrize(("checkpoint", "expected", "absent"), [
    ({"every_steps": 7}, {"PERDURE_CHECKPOINT_EVERY": "7"}, ["PERDURE_CHECKPOINT_INTERVAL_FILE"]),
    ({"every_seconds": 90}, {"PERDURE_CHECKPOINT_EVERY_SECONDS": "90"},
     ["PERDURE_CHECKPOINT_INTERVAL_FILE"]),
    ({"every": "auto"}, {"PERDURE_CHECKPOINT_INTERVAL_FILE": "/st/intervals/j-1.json"},
     ["PERDURE_CHECKPOINT_EVERY_SECONDS"]),
])
def test_the_checkpoint_interval_reaches_the_replica(checkpoint: dict[str, Any],
                                                     expected: dict[str, str],
                                                     absent: list[str]) -> None:
    env = _env(checkpoint)
    assert {k: env.get(k) for k in expected} == expected
    assert not [k for k in absent if k in env]


def test_node_dir_and_secret_come_from_the_shell() -> None:
    env = _env({}, node_dir="/dev/shm/p", job_secret=lambda job_id: f"secret-of-{job_id}")
    assert env["PERDURE_NODE_DIR"] == "/dev/shm/p/j-1"
    assert env["PERDURE_JOB_SECRET"] == "secret-of-j-1"
    assert "PERDURE_NODE_DIR" not in _env({})
