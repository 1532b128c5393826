"""A launch that waits in the backend's own queue (a Slurm allocation pending): the job is
QUEUED with that scheduler's reason, holds its slots, is not admitted twice, and is stopped
like a started job; once the allocation starts it goes PENDING, then RUNNING."""

from __future__ import annotations

from tests.helpers.sim import Sim, spec

from perdure.backends.base import Backend, NodeInfo
from perdure.backends.fake import FakeBackend
from perdure.core.events import (
    QUEUED_IN_BACKEND,
    Launch,
    LaunchQueued,
    Observation,
    ReplicaExited,
    Stop,
)
from perdure.core.goodput import state_durations
from perdure.core.states import JobState, ReplicaState


class Queueing(Backend):
    """The fake backend behind a queue: launches wait (reported with `reason`) until released."""

    def __init__(self, inner: FakeBackend, reason: str = "Resources") -> None:
        self.inner, self.reason = inner, reason
        self.held: dict[str, Launch] = {}
        self.told: dict[str, str] = {}
        self.launched = inner.launched
        self.open = False

    def launch(self, launch: Launch) -> None:
        self.held[launch.launch_id] = launch

    def stop(self, stop: Stop) -> None:
        self.inner.stop(stop)

    def kill_node(self, node: str) -> None:
        self.inner.kill_node(node)

    def nodes(self) -> list[NodeInfo]:
        return self.inner.nodes()

    def adopt(self, launch_ids: list[str]) -> list[Observation]:
        return self.inner.adopt(launch_ids)

    def close(self) -> None:
        self.inner.close()

    def poll(self) -> list[Observation]:
        out: list[Observation] = []
        for lid, launch in list(self.held.items()):
            if self.open:
                del self.held[lid]
                out.append(LaunchQueued(lid, "", self.inner.clock(), "Slurm", "Slurm job 7"))
                self.inner.launch(launch)
            elif self.told.get(lid) != self.reason:
                self.told[lid] = self.reason
                out.append(LaunchQueued(lid, self.reason, self.inner.clock(), "Slurm",
                                        "Slurm job 7"))
        return out + self.inner.poll()


def queued_sim(nodes: dict[str, int] | None = None) -> tuple[Sim, Queueing]:
    sim = Sim(nodes=nodes or {"a": 2})
    q = Queueing(sim.backend)
    sim.backend = q  # type: ignore[assignment]
    return sim, q


def two_slots() -> object:
    return spec(pools=[{"name": "w", "replicas": 2, "command": ["python", "t.py"]}])


def test_a_launch_in_the_backends_queue_shows_queued_with_its_reason_then_runs() -> None:
    sim, q = queued_sim()
    j = sim.submit(two_slots())  # type: ignore[arg-type]
    for _ in range(3):
        sim.step()
    job = sim.job(j)
    assert job.state is JobState.QUEUED and job.in_backend_queue, sim.messages(j)
    assert job.backend_queue == "Slurm: Resources (Slurm job 7)"
    assert f"{QUEUED_IN_BACKEND} Slurm: Resources (Slurm job 7)" in sim.messages(j)
    assert all(r.state is ReplicaState.STARTING for r in job.replicas)
    assert job.attempt == 1 and len(q.held) == 2  # admitted once, launched once
    # it holds its slots: another job waits for perdure's own admission
    other = sim.submit(spec(pools=[{"name": "w", "command": ["python", "t.py"]}]))
    sim.step()
    assert sim.job(other).awaiting_admission and not sim.job(other).in_backend_queue
    # Slurm's reason changes: said once
    q.reason = "Priority"
    sim.step()
    sim.step()
    assert sim.messages(j).count(f"{QUEUED_IN_BACKEND} Slurm: Priority (Slurm job 7)") == 1
    q.open = True
    job = sim.run_until(j, {JobState.RUNNING})
    assert not job.in_backend_queue
    assert any(m.startswith("PENDING: Slurm started Slurm job 7") for m in sim.messages(j))
    # the wait counts as queued time (not running) in the job's state timeline
    timeline = [(e.time, e.message.split(":", 1)[0]) for e in sim.events
                if e.job_id == j and e.kind in ("state", "running")]
    spent = state_durations(timeline, sim.now)
    assert spent["QUEUED"] >= 0.3 and spent.get("PENDING", 0.0) < spent["QUEUED"], timeline


def test_cancel_while_in_the_backends_queue_stops_its_launches() -> None:
    sim, q = queued_sim()
    j = sim.submit(two_slots())  # type: ignore[arg-type]
    sim.step()
    sim.step()
    assert sim.job(j).in_backend_queue
    stops: list[Stop] = []
    q.stop = stops.append  # type: ignore[method-assign]
    sim.command("cancel", j)
    sim.step()
    assert sim.job(j).state is JobState.CANCELLING and len(stops) == 2, sim.messages(j)
    sim.pending.extend(ReplicaExited(s.launch_id, 143, sim.now, signal=15) for s in stops)
    job = sim.run_until(j, {JobState.CANCELLED})
    assert job.state is JobState.CANCELLED and not job.backend_queue


def test_preempted_while_in_the_backends_queue_is_requeued_for_admission() -> None:
    sim, q = queued_sim()
    j = sim.submit(two_slots())  # type: ignore[arg-type]
    sim.step()
    sim.step()
    stops: list[Stop] = []
    q.stop = stops.append  # type: ignore[method-assign]
    sim.command("preempt", j)
    sim.step()
    assert sim.job(j).state is JobState.SUSPENDING and len(stops) == 2
    sim.pending.extend(ReplicaExited(s.launch_id, 143, sim.now, signal=15) for s in stops)
    sim.step()
    job = sim.job(j)
    # requeued: its second admission is perdure's own, with no stale backend reason
    assert job.attempt in (1, 2) and not (job.state is JobState.QUEUED and job.backend_queue)


def test_a_replacements_wait_while_others_run_is_the_replicas_not_the_jobs() -> None:
    sim, q = queued_sim({"a": 1, "b": 1})
    q.open = True
    j = sim.submit(spec(pools=[{"name": "w", "replicas": 2, "command": ["python", "t.py"]}],
                        restart={"scope": "replica"}))
    job = sim.run_until(j, {JobState.RUNNING})
    lost = job.replicas[1]
    assert lost.launch_id is not None
    sim.pending.append(ReplicaExited(lost.launch_id, 1, sim.now))
    q.open = False
    sim.step()  # restarted in place: its new launch waits in the queue
    sim.step()
    job = sim.job(j)
    assert job.replicas[1].state is ReplicaState.STARTING, sim.messages(j)
    assert job.state is JobState.PENDING and not job.in_backend_queue
    assert "w-1 waits in the backend's queue: Slurm: Resources (Slurm job 7)" in (
        sim.messages(j))
