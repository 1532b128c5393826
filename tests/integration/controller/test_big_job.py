"""A big job through the real controller and sqlite store (fake backend, fake clock): a big
job is read over ticks (LOAD_ROWS_PER_TICK rows a tick) and admitted by the next; the
backend's news is taken at most OBSERVATIONS_PER_TICK a tick, in order, and at most
launches_per_tick launches and stops are sent a tick, so no tick handles every replica at
once; after every tick the store holds exactly what the controller holds (a controller
killed then restarts from it); a node failure's group restart relaunches each replica once;
a controller that dies while launches are still to be sent restarts the round cleanly."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

from perdure.backends.base import NodeInfo
from perdure.backends.fake import FakeBackend, FakeRun
from perdure.controller import loop
from perdure.controller.loop import OBSERVATIONS_PER_TICK, Controller
from perdure.core.clusterspec import ClusterSpec, NodeSpec, QueueSpec
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec
from perdure.core.states import JobState, ReplicaState
from perdure.store.rows import ReplicaRows
from perdure.store.sqlite import Store

NODES, PER_NODE = 188, 8  # 1,504 replicas: about six ticks' worth of news (256 a tick)
TOTAL = NODES * PER_NODE
PER_TICK = LaunchSettings("", "").launches_per_tick or 0


def controller(tmp_path: Path, backend: FakeBackend, now: list[float]) -> Controller:
    cluster = ClusterSpec(backend="fake", nodes=[NodeSpec(name=n.name, slots=n.slots)
                                                 for n in backend.nodes()],
                          queues=[QueueSpec(name="default", quota=None)])
    ctl = Controller(tmp_path, Store(tmp_path / "perdure.db"), backend, cluster,
                     LaunchSettings(str(tmp_path), sys.executable), clock=lambda: now[0])
    ctl.start()
    return ctl


def big(tmp_path: Path, now: list[float]) -> tuple[Controller, FakeBackend, Job]:
    tmp_path.mkdir(exist_ok=True)
    infos = [NodeInfo(f"n{i:04d}", PER_NODE) for i in range(NODES + 1)]
    backend = FakeBackend(infos, lambda launch: FakeRun(seconds=None), clock=lambda: now[0])
    ctl = controller(tmp_path, backend, now)
    spec = JobSpec.model_validate({"name": "big", "pools": [
        {"name": "w", "replicas": TOTAL, "command": ["python", "t.py"]}]})
    job = Job("big-000001", spec, str(tmp_path), now[0], replicas=make_replicas(spec))
    ctl.store.submit(job)
    return ctl, backend, job


def test_a_big_jobs_news_is_taken_over_bounded_ticks(tmp_path: Path) -> None:
    now = [1000.0]
    ctl, backend, job = big(tmp_path, now)
    store = ctl.store

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

    assert tick().state is JobState.QUEUED and not backend.launched  # loaded, no more
    assert tick().state is JobState.PENDING and not backend.launched  # admitted, placed
    tick()  # the round's layout built, the first launches sent
    assert len(backend.launched) == PER_TICK < TOTAL
    sent, seen = [PER_TICK], [0]
    while (j := tick()).state is not JobState.RUNNING:
        sent.append(len(backend.launched))
        seen.append(sum(r.state is ReplicaState.RUNNING for r in j.replicas))
        assert len(seen) < 10
    assert sent[-1] == TOTAL and all(
        b - a <= PER_TICK for a, b in itertools.pairwise([0, *sent]))
    assert all(0 < b - a <= OBSERVATIONS_PER_TICK
               for a, b in itertools.pairwise([*seen, TOTAL]))
    assert len({x.env["MASTER_PORT"] for x in backend.launched}) == 1

    store.command("fail-node", "n0003")
    for _ in range(20):
        if (j := tick()).state is JobState.RUNNING and j.round == 1:
            break
    assert j.state is JobState.RUNNING and j.round == 1
    assert len(backend.launched) == 2 * TOTAL  # each replica relaunched once
    assert len({launch.launch_id for launch in backend.launched}) == len(backend.launched)
    assert not any(r.node == "n0003" for r in j.replicas)
    ctl.close()
    store.close()


def test_a_controller_dead_before_its_launches_were_sent_restarts_the_round(
        tmp_path: Path) -> None:
    now = [1000.0]
    ctl, backend, job = big(tmp_path, now)
    ctl.tick()  # loaded
    ctl.tick()  # admitted: placed, planned
    ctl.tick()  # the first launches sent, the rest planned
    assert 0 < len(backend.launched) < TOTAL
    ctl.close()  # killed after that tick: its store is all a new controller has
    ctl.store.close()
    ctl = controller(tmp_path, backend, now)  # the replicas launched still run
    for _ in range(30):
        ctl.tick()
        now[0] += 0.25
        j = ctl.snapshot.jobs[job.id]
        if j.state is JobState.RUNNING:
            break
    assert j.state is JobState.RUNNING and j.round == 1 and j.unlaunched == 0
    assert len(backend.launched) == PER_TICK + TOTAL  # the whole round once more
    assert {p.launch.env["PERDURE_ROUND"] for p in backend.procs.values()} == {"1"}
    assert len(backend.procs) == TOTAL  # the first round's processes were stopped
    assert len({x.env["MASTER_PORT"] for x in backend.launched[PER_TICK:]}) == 1
    ctl.close()
    ctl.store.close()


def test_a_big_job_is_read_over_ticks_and_a_restart_reads_it_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most LOAD_ROWS_PER_TICK replica rows are read a tick; the job enters the
    controller once read whole (its submit command taken only then), so a controller that
    dies mid-read loses nothing: the next one reads its unfinished jobs as it starts."""
    monkeypatch.setattr(loop, "LOAD_ROWS_PER_TICK", 500)  # 1,504 rows: 4 ticks
    read: list[tuple[int, int]] = []
    part = ReplicaRows.part

    def noted(self: ReplicaRows, job_id: str, count: int, start: int, stop: int) -> list:  # type: ignore[type-arg]
        read.append((start, stop))
        return part(self, job_id, count, start, stop)

    monkeypatch.setattr(ReplicaRows, "part", noted)
    now = [1000.0]
    ctl, backend, job = big(tmp_path, now)
    for _ in range(3):
        ctl.tick()
        assert job.id not in ctl.snapshot.jobs
    ctl.tick()
    assert read == [(0, 500), (500, 1000), (1000, 1500), (1500, 1504)]
    assert ctl.snapshot.jobs[job.id].state is JobState.QUEUED and not backend.launched
    ctl.tick()
    assert ctl.snapshot.jobs[job.id].state is JobState.PENDING  # admitted
    ctl.tick()
    assert len(backend.launched) == PER_TICK
    ctl.close()
    ctl.store.close()

    ctl, backend, job = big(tmp_path / "again", now)
    ctl.tick()
    ctl.tick()
    assert job.id not in ctl.snapshot.jobs
    ctl.close()  # killed mid-read
    ctl.store.close()
    ctl = controller(tmp_path / "again", backend, now)  # reads it as it starts
    ctl.tick()
    assert ctl.snapshot.jobs[job.id].state is JobState.PENDING  # its command was not lost
    ctl.tick()
    assert len(backend.launched) == PER_TICK
    ctl.close()
    ctl.store.close()


def test_a_big_job_whose_rows_go_missing_mid_read_fails_on_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "LOAD_ROWS_PER_TICK", 500)
    now = [1000.0]
    ctl, backend, job = big(tmp_path, now)
    ctl.tick()
    ctl.store.db.execute("DELETE FROM replicas WHERE job_id=? AND idx>=1200", (job.id,))
    for _ in range(4):
        ctl.tick()
    stored = ctl.store.job_rows()
    assert [r["state"] for r in stored if r["id"] == job.id] == ["FAILED"]
    assert job.id not in ctl.snapshot.jobs and not backend.launched
    ctl.close()
    ctl.store.close()


def test_a_big_elastic_jobs_round_is_written_before_its_first_launch_even_after_a_crash(
        tmp_path: Path) -> None:
    """A big elastic job is placed by one tick, its round 0 published (round.json) by the
    next and its launches sent from the one after: every replica starts with its round on
    disk, members on the nodes they are launched on, also when the controller died after
    the placement (the next one places the job again and publishes before launching)."""
    now = [1000.0]
    round_file = tmp_path / "rdzv" / "big-000001" / "round.json"
    seen: list[bool] = []

    def script(launch: object) -> FakeRun:
        seen.append(round_file.exists())
        return FakeRun(seconds=None)

    tmp_path.mkdir(exist_ok=True)
    infos = [NodeInfo(f"n{i:04d}", PER_NODE) for i in range(NODES + 1)]
    backend = FakeBackend(infos, script, clock=lambda: now[0])
    ctl = controller(tmp_path, backend, now)
    spec = JobSpec.model_validate({"name": "big", "pools": [
        {"name": "w", "replicas": TOTAL, "min_replicas": TOTAL // 2,
         "command": ["python", "t.py"]}]})
    job = Job("big-000001", spec, str(tmp_path), now[0], replicas=make_replicas(spec))
    ctl.store.submit(job)
    ctl.tick()  # loaded
    ctl.tick()  # admitted: placed, planned; no round yet
    assert not round_file.exists() and not backend.launched
    ctl.close()  # killed after that tick
    ctl.store.close()
    ctl = controller(tmp_path, backend, now)
    for _ in range(40):
        ctl.tick()
        now[0] += 0.25
        if ctl.snapshot.jobs[job.id].state is JobState.RUNNING:
            break
    j = ctl.snapshot.jobs[job.id]
    assert j.state is JobState.RUNNING and len(backend.launched) == TOTAL and all(seen)
    members = json.loads(round_file.read_text())["members"]
    assert [(m["replica"], m["node"]) for m in members] == [
        (r.name, r.node) for r in j.replicas]
    ctl.close()
    ctl.store.close()
