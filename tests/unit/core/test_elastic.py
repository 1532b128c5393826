"""Elastic jobs on the pure core: shrink, grow back, pause, and what is not a failure."""

from __future__ import annotations

from tests.helpers.sim import Sim, spec

from perdure.backends.fake import FakeRun
from perdure.core.events import Launch, Rendezvous
from perdure.core.states import JobState


def elastic_spec(mode: str = "resize", replicas: int = 4, min_replicas: int = 2) -> object:
    return spec(pools=[{"name": "worker", "replicas": replicas, "min_replicas": min_replicas,
                        "command": ["python", "t.py"]}], elastic={"mode": mode})


class RecordingSim(Sim):
    rounds: list[Rendezvous]

    def step(self, dt: float = 0.1):  # type: ignore[no-untyped-def]
        out = super().step(dt)
        self.rounds = getattr(self, "rounds", [])
        self.rounds.extend(d for d in out.decisions if isinstance(d, Rendezvous))
        return out


def run_steps(sim: Sim, n: int = 10) -> None:
    for _ in range(n):
        sim.step()


def test_resize_shrinks_on_node_loss_and_grows_back() -> None:
    sim = RecordingSim(nodes={"a": 2, "b": 2})
    j = sim.submit(elastic_spec())  # type: ignore[arg-type]
    job = sim.run_until(j, {JobState.RUNNING})
    assert [len(r.members) for r in sim.rounds] == [4]
    node = job.replicas[0].node
    sim.command("fail-node", str(node))
    run_steps(sim)
    job = sim.job(j)
    assert job.state is JobState.RUNNING and len(job.members) == 2
    assert sim.rounds[-1].reason.startswith("shrink")
    stops = [s for s in sim.backend.stops if s.launch_id.startswith(j)]
    assert stops == []  # survivors are never stopped
    assert all(r.restarts == 0 for r in job.replicas)  # node loss is a membership change
    sim.command("restore-node", str(node))
    run_steps(sim)
    job = sim.job(j)
    assert len(job.members) == 4 and job.state is JobState.RUNNING
    # Replicas lost together are one change, and so are their replacements.
    sizes = [r.reason.split(":")[0] for r in sim.rounds]
    assert sizes == ["admitted", "shrink 4 -> 2", "grow 2 -> 4"], sizes
    assert [r.round for r in sim.rounds] == sorted(r.round for r in sim.rounds)
    # The words match the accounting: a node loss spends no restart.
    decisions = [m for m in sim.messages(j) if m.startswith("restart") and "node lost" in m]
    assert len(decisions) == 2 and all("no restart counted" in m for m in decisions)
    assert not any("restart 1 of" in m for m in sim.messages(j))


def test_resize_crash_counts_a_restart_but_does_not_stop_survivors() -> None:
    crashed = {"done": False}

    def script(launch: Launch) -> FakeRun:
        if launch.replica == "worker-3" and not crashed["done"]:
            crashed["done"] = True
            return FakeRun(1, 1)
        return FakeRun()

    sim = RecordingSim(script=script)
    j = sim.submit(elastic_spec())  # type: ignore[arg-type]
    sim.run_until(j, {JobState.RUNNING})
    run_steps(sim, 20)
    job = sim.job(j)
    assert job.replicas[3].restarts == 1 and len(job.members) == 4
    reasons = [r.reason.split(":")[0] for r in sim.rounds]
    assert reasons == ["admitted", "shrink 4 -> 3", "grow 3 -> 4"]
    assert not sim.backend.stops


def test_pause_waits_for_the_replacement_at_the_same_world_size() -> None:
    sim = RecordingSim(nodes={"a": 2, "b": 2})
    j = sim.submit(elastic_spec(mode="pause"))  # type: ignore[arg-type]
    job = sim.run_until(j, {JobState.RUNNING})
    node = job.replicas[0].node
    sim.command("fail-node", str(node))
    sim.step()
    sim.step()
    assert sim.job(j).state is JobState.PENDING
    pauses = [r.reason for r in sim.rounds if r.reason.startswith("pause")]
    assert len(pauses) == 1 and pauses[0].startswith("pause at world size 4"), pauses
    sim.command("restore-node", str(node))
    job = sim.run_until(j, {JobState.RUNNING})
    assert len(job.members) == 4 and all(len(r.members) == 4 for r in sim.rounds)


def test_below_minimum_pauses_even_in_resize_mode() -> None:
    sim = RecordingSim(nodes={"a": 3, "b": 1})
    j = sim.submit(elastic_spec(min_replicas=3))  # type: ignore[arg-type]
    job = sim.run_until(j, {JobState.RUNNING})
    big = max({"a", "b"}, key=lambda n: sum(r.node == n for r in job.replicas))
    sim.command("fail-node", big)
    run_steps(sim, 3)
    assert sim.job(j).state is JobState.PENDING
    assert any(r.reason.startswith("pause") for r in sim.rounds)


def test_elastic_launch_env_carries_the_round() -> None:
    sim = RecordingSim()
    j = sim.submit(elastic_spec())  # type: ignore[arg-type]
    sim.run_until(j, {JobState.RUNNING})
    env = sim.backend.launched[1].env
    assert env["PERDURE_RDZV_DIR"] == f"/state/rdzv/{j}"
    assert env["PERDURE_MIN_WORLD_SIZE"] == "2" and env["PERDURE_ROUND"] == "0"
