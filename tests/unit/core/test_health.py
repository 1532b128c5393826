"""Node health (core/health.py): machine faults are strikes against their node, a node at the
limit is quarantined, a script's own fault on two nodes is not; with a fake clock."""

from __future__ import annotations

import dataclasses
import signal

import pytest
from tests.helpers.sim import SETTINGS, Sim, spec

from perdure.backends.fake import FakeRun
from perdure.core.events import Command, ErrorInfo, Launch, NodeCheckFailed
from perdure.core.health import machine_fault
from perdure.core.healthspec import HealthSpec
from perdure.core.policy import Failure
from perdure.core.states import JobState

SEGV = int(signal.SIGSEGV)


@pytest.mark.parametrize(("failure", "kind"), [
    (Failure("w-0", True, 139, signal=SEGV), "SIGSEGV"),
    (Failure("w-0", True, 135), "SIGBUS"),  # 128 + SIGBUS, from a shell's exit status
    (Failure("w-0", True, 132, signal=int(signal.SIGILL)), "SIGILL"),
    (Failure("w-0", True, 1, error=ErrorInfo("DistBackendError", "NCCL error: "
                                             "ncclUnhandledCudaError: Call to CUDA function "
                                             "failed")), "NCCL CUDA error"),
    (Failure("w-0", True, 1, error=ErrorInfo("RuntimeError", "CUDA error: uncorrectable ECC "
                                             "error encountered")), "ECC error"),
    (Failure("w-0", True, 1, error=ErrorInfo("RuntimeError", "NVRM: Xid 79: GPU has fallen "
                                             "off the bus")), "Xid error"),
    (Failure("w-0", True, 1, error=ErrorInfo("RuntimeError", "CUDA error: unspecified launch "
                                             "failure")), "CUDA error"),
    # the script's, a peer's, or a notice: none points at the machine
    (Failure("w-0", True, 1, error=ErrorInfo("ValueError", "bad shape")), None),
    (Failure("w-0", True, 137, signal=9, oom=True), None),
    (Failure("w-0", True, 1, error=ErrorInfo("RuntimeError", "CUDA error: out of memory")),
     None),
    (Failure("w-0", True, 1, error=ErrorInfo("RuntimeError", "CUDA error: device-side assert "
                                             "triggered")), None),
    (Failure("w-0", True, 1, error=ErrorInfo("DistBackendError", "NCCL error: "
                                             "ncclRemoteError: remote process exited")), None),
    (Failure("w-0", True, 1, error=ErrorInfo("RuntimeError",
                                             "Connection closed by peer")), None),
    (Failure("w-0", True, 139, signal=SEGV, notice="maintenance"), None),
    (Failure("w-0", True, 137, signal=9), None),
    (Failure("w-0", True, 0), None),
])
def test_which_failures_point_at_the_machine(failure: Failure, kind: str | None) -> None:
    assert machine_fault(failure) == kind




def segv_on(bad: str) -> object:
    def script(launch: Launch) -> FakeRun:
        if launch.node == bad:
            return FakeRun(seconds=1.0, exit_code=139, signal=SEGV)
        return FakeRun()
    return script


def two_replicas(**restart: object) -> object:
    return spec(pools=[{"name": "worker", "replicas": 2, "command": ["python", "t.py"]}],
                restart={"max_job_retries": 5, **restart})


def settings(**health: object) -> object:
    return dataclasses.replace(SETTINGS, health=HealthSpec.model_validate(health))


def test_a_node_that_keeps_crashing_replicas_is_quarantined_and_left_out() -> None:
    sim = Sim(nodes={"a": 1, "b": 1, "c": 1}, script=segv_on("b"))  # type: ignore[arg-type]
    j = sim.submit(two_replicas())  # type: ignore[arg-type]
    for _ in range(400):
        sim.step()
        if sim.snap.nodes["b"].fence:
            break
    b = sim.snap.nodes["b"]
    assert b.fence.startswith("2 failures within 604800s: SIGSEGV of worker-"), b.fence
    assert not b.schedulable and b.shown == "QUARANTINED"
    fenced = [m for m in sim.messages(None) if "QUARANTINED" in m]
    assert len(fenced) == 1 and fenced[0].startswith("node b QUARANTINED: 2 failures")
    assert "perdure node restore b" in fenced[0]
    job = sim.run_until(j, {JobState.RUNNING}, steps=200)
    assert {r.node for r in job.replicas} == {"a", "c"}
    for _ in range(50):
        sim.step()
    assert sim.job(j).state is JobState.RUNNING  # b gets nothing more


def test_restore_lifts_the_quarantine_and_forgets_the_failures() -> None:
    sim = Sim(nodes={"a": 1, "b": 1, "c": 1}, script=segv_on("b"))  # type: ignore[arg-type]
    j = sim.submit(two_replicas())  # type: ignore[arg-type]
    for _ in range(400):
        sim.step()
        if sim.snap.nodes["b"].fence:
            break
    sim.run_until(j, {JobState.RUNNING}, steps=200)
    sim.command("restore-node", "b")
    sim.step()
    b = sim.snap.nodes["b"]
    assert not b.fence and not b.strikes and b.schedulable
    assert any(m == "node b restored: ready for replicas; quarantine lifted, its failures "
               "forgotten" for m in sim.messages(None))


def test_a_backend_seeing_a_lost_node_again_keeps_its_quarantine() -> None:
    sim = Sim(nodes={"a": 1, "b": 1}, settings=settings(max_node_failures=2))  # type: ignore[arg-type]
    for _ in range(2):
        sim.command("fail-node", "b")
        sim.step()
        sim.command("node-back", "b")
        sim.step()
    b = sim.snap.nodes["b"]
    assert b.fence == "2 failures within 604800s: node lost; node lost", b.fence
    assert not b.schedulable
    assert any("node b is back but stays QUARANTINED" in m for m in sim.messages(None))


def test_failures_older_than_the_window_are_forgotten() -> None:
    sim = Sim(nodes={"a": 1, "b": 1},
              settings=settings(window_seconds=60))  # type: ignore[arg-type]
    sim.command("fail-node", "b")
    sim.step()
    sim.command("node-back", "b")
    sim.step(61.0)
    sim.command("fail-node", "b")
    sim.step()
    b = sim.snap.nodes["b"]
    assert not b.fence and len(b.strikes) == 1


def test_zero_turns_fencing_off() -> None:
    sim = Sim(nodes={"a": 1, "b": 1},
              settings=settings(max_node_failures=0))  # type: ignore[arg-type]
    for _ in range(3):
        sim.command("fail-node", "b")
        sim.step()
        sim.command("node-back", "b")
        sim.step()
    assert not sim.snap.nodes["b"].fence and sim.snap.nodes["b"].schedulable


def test_a_replica_failing_the_same_way_on_two_nodes_fences_neither() -> None:
    """worker-1 dies of SIGSEGV wherever it runs: the script's fault."""
    def script(launch: Launch) -> FakeRun:
        if launch.replica == "worker-1":
            return FakeRun(seconds=1.0, exit_code=139, signal=SEGV)
        return FakeRun()

    sim = Sim(nodes={"a": 1, "b": 1, "c": 1, "d": 1}, script=script,
              settings=settings(max_node_failures=2))  # type: ignore[arg-type]
    j = sim.submit(spec(pools=[{"name": "worker", "replicas": 2,
                                "command": ["python", "t.py"]}],
                        restart={"max_job_retries": 3}))
    sim.run_until(j, {JobState.FAILED}, steps=800)
    assert not any(n.fence for n in sim.snap.nodes.values()), {
        n.name: n.fence for n in sim.snap.nodes.values()}
    assert any("the script's fault, not the nodes'" in m for m in sim.messages(j))


def test_a_script_exception_is_no_strike() -> None:
    def script(launch: Launch) -> FakeRun:
        return FakeRun(seconds=1.0, exit_code=1, error=ErrorInfo("ValueError", "bad"))

    sim = Sim(nodes={"a": 1}, script=script)  # type: ignore[arg-type]
    j = sim.submit(spec())
    sim.run_until(j, {JobState.FAILED}, steps=100)
    assert sim.snap.nodes["a"].strikes == ()


def test_a_failed_preflight_quarantines_at_once_and_moves_replicas() -> None:
    sim = Sim(nodes={"a": 1, "b": 1, "c": 1})
    j = sim.submit(two_replicas())  # type: ignore[arg-type]
    job = sim.run_until(j, {JobState.RUNNING})
    where = {r.node for r in job.replicas}
    bad = sorted(where)[0]
    sim.pending.append(NodeCheckFailed(bad, "gpu 0: matmul 12 TFLOP/s under the floor 40",
                                       sim.now))
    sim.step()
    node = sim.snap.nodes[bad]
    assert node.fence == "health check failed: gpu 0: matmul 12 TFLOP/s under the floor 40"
    assert any(m.startswith("move worker-") and f"off node {bad} (quarantined" in m
               for m in sim.messages(j)), sim.messages(j)
    job = sim.run_until(j, {JobState.RUNNING}, steps=200)
    assert bad not in {r.node for r in job.replicas}
    assert all(r.restarts == 0 for r in job.replicas)


def test_the_only_ready_node_is_not_fenced() -> None:
    sim = Sim(nodes={"local": 2}, script=segv_on("local"))  # type: ignore[arg-type]
    j = sim.submit(two_replicas(max_job_retries=2))  # type: ignore[arg-type]
    sim.run_until(j, {JobState.FAILED}, steps=400)
    node = sim.snap.nodes["local"]
    assert not node.fence and node.schedulable
    assert any(m.startswith("node local not quarantined, being the only ready node: 2 "
                            "failures") for m in sim.messages(None)), sim.messages(None)


def test_a_drain_command_carries_the_platforms_reason_into_the_events() -> None:
    s = Sim(nodes={"a": 1, "b": 1})
    j = s.submit(spec())
    job = s.run_until(j, {JobState.RUNNING})
    node = job.replicas[0].node
    s.pending.append(Command("drain-node", str(node), s.now, why="Slurm drains it: fan"))
    s.step()
    assert f"node {node} draining (Slurm drains it: fan): maintenance notice to its replicas" \
        in s.messages(None)
    assert f"move worker-0 off node {node} (Slurm drains it: fan, no restart)" in s.messages(j)


def test_a_job_that_cannot_fit_without_the_quarantined_node_says_so() -> None:
    sim = Sim(nodes={"a": 1, "b": 1})
    sim.pending.append(NodeCheckFailed("b", "FAIL memory: 12 MiB available", sim.now))
    sim.step()
    j = sim.submit(two_replicas())  # type: ignore[arg-type]
    for _ in range(5):
        sim.step()
    job = sim.job(j)
    assert job.state is JobState.QUEUED
    assert job.wait_reason.endswith("(b quarantined: `perdure node ls` says why, `perdure node "
                                    "restore` lifts it)"), job.wait_reason


def test_nodes_lost_together_lost_what_they_share() -> None:
    """A switch takes a, b and c at once, twice: none of them is at fault; b lost alone
    afterwards is, with its shared losses not counted."""
    sim = Sim(nodes={"a": 1, "b": 1, "c": 1, "d": 1},
              settings=settings(max_node_failures=2))  # type: ignore[arg-type]
    for _ in range(2):
        for node in ("a", "b", "c"):
            sim.command("fail-node", node)
        sim.step()
        for node in ("a", "b", "c"):
            sim.command("node-back", node)
        sim.step(60.0)
    assert not any(n.fence for n in sim.snap.nodes.values()), sim.messages(None)
    sim.command("fail-node", "b")
    sim.step()
    assert not sim.snap.nodes["b"].fence  # one loss of its own
    sim.command("node-back", "b")
    sim.step(60.0)
    sim.command("fail-node", "b")
    sim.step()
    assert sim.snap.nodes["b"].fence == "2 failures within 604800s: node lost; node lost"
