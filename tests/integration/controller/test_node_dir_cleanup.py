"""A job's node-local directory ($PERDURE_NODE_DIR) is given to its replicas and removed when
the job ends (real controller and sqlite store, fake backend: no processes)."""

from __future__ import annotations

import time
from pathlib import Path

from perdure.backends.base import NodeInfo
from perdure.backends.fake import FakeBackend, FakeRun
from perdure.cli.common import new_job
from perdure.controller.loop import Controller
from perdure.core.clusterspec import default_cluster
from perdure.core.launchenv import LaunchSettings
from perdure.core.spec import JobSpec
from perdure.store.sqlite import Store


def test_the_node_dir_is_handed_out_and_removed_when_the_job_ends(tmp_path: Path) -> None:
    state, shm = tmp_path / "state", tmp_path / "shm"
    state.mkdir()
    store = Store(state / "perdure.db")
    cluster = default_cluster(2)
    backend = FakeBackend([NodeInfo("local", 2)], lambda launch: FakeRun(seconds=0.05))
    settings = LaunchSettings(str(state), "/usr/bin/python3", node_dir=str(shm))
    spec = JobSpec.model_validate({"name": "job", "pools": [
        {"name": "worker", "replicas": 2, "command": ["python", "t.py"]}]})
    job = new_job(spec, tmp_path / "job.yaml", cluster, state)
    store.submit(job)
    ctl = Controller(state, store, backend, cluster, settings, interval=0.005)
    ctl.start()
    try:
        deadline = time.time() + 20
        while not backend.launched and time.time() < deadline:
            ctl.tick()
        envs = {launch.env["PERDURE_NODE_DIR"] for launch in backend.launched}
        assert envs == {str(shm / job.id)}
        (shm / job.id / "snapshots-w2").mkdir(parents=True)  # what the replicas keep there
        ctl.run(until=lambda: (store.job(job.id) or job).state.terminal or time.time() > deadline)
        assert (store.job(job.id) or job).state.value == "SUCCEEDED"
        assert not (shm / job.id).exists()
    finally:
        ctl.close()
        store.close()
