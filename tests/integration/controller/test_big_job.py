"""A big job through the real controller and sqlite store (fake backend, fake clock): the
backend's news is taken at most OBSERVATIONS_PER_TICK a tick, in order, so no tick handles
every replica's start or exit at once; after every tick the store holds exactly what the
controller holds (a controller killed then restarts from it); a node failure's group restart
relaunches each replica once."""

from __future__ import annotations

import sys
from pathlib import Path

from perdure.backends.base import NodeInfo
from perdure.backends.fake import FakeBackend, FakeRun
from perdure.controller.loop import OBSERVATIONS_PER_TICK, Controller
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job, make_replicas
from perdure.core.spec import ClusterSpec, JobSpec, NodeSpec, QueueSpec
from perdure.core.states import JobState, ReplicaState
from perdure.store.sqlite import Store

NODES, PER_NODE = 375, 8  # 3,000 replicas: about three ticks' worth of news


def test_a_big_jobs_news_is_taken_over_bounded_ticks(tmp_path: Path) -> None:
    now = [1000.0]
    infos = [NodeInfo(f"n{i:04d}", PER_NODE) for i in range(NODES + 1)]
    store = Store(tmp_path / "perdure.db")
    backend = FakeBackend(infos, lambda launch: FakeRun(seconds=None), clock=lambda: now[0])
    cluster = ClusterSpec(backend="fake", nodes=[NodeSpec(name=n.name, slots=n.slots)
                                                 for n in infos],
                          queues=[QueueSpec(name="default", quota=None)])
    ctl = Controller(tmp_path, store, backend, cluster,
                     LaunchSettings(str(tmp_path), sys.executable), clock=lambda: now[0])
    ctl.start()
    spec = JobSpec.model_validate({"name": "big", "pools": [
        {"name": "w", "replicas": NODES * PER_NODE, "command": ["python", "t.py"]}]})
    job = Job("big-000001", spec, str(tmp_path), now[0], replicas=make_replicas(spec))
    store.submit(job)

    def tick() -> Job:
        ctl.tick()
        now[0] += 0.25
        mine = ctl.snapshot.jobs[job.id]
        assert store.job(job.id) is not None
        fresh = Store(tmp_path / "perdure.db")  # what a restarted controller would read
        try:
            back = fresh.job(job.id)
        finally:
            fresh.close()
        assert back is not None and back.to_json() == mine.to_json()
        return mine

    assert tick().state is JobState.PENDING  # admitted: every replica launched at once
    assert len(backend.launched) == NODES * PER_NODE
    seen = []
    while (j := tick()).state is not JobState.RUNNING:
        seen.append(sum(r.state is ReplicaState.RUNNING for r in j.replicas))
        assert len(seen) < 10
    assert seen == [OBSERVATIONS_PER_TICK * (i + 1) for i in range(len(seen))]

    store.command("fail-node", "n0003")
    for _ in range(20):
        if (j := tick()).state is JobState.RUNNING and j.round == 1:
            break
    assert j.state is JobState.RUNNING and j.round == 1
    assert len(backend.launched) == 2 * NODES * PER_NODE  # each replica relaunched once
    assert len({launch.launch_id for launch in backend.launched}) == len(backend.launched)
    assert not any(r.node == "n0003" for r in j.replicas)
    ctl.close()
    store.close()
