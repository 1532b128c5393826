"""The `stragglers: drain` rule (core.straggler.drain): which straggler's node is drained."""

from __future__ import annotations

import pytest

from perdure.core.events import Command
from perdure.core.model import Job
from perdure.core.records import Node
from perdure.core.replica import make_replicas
from perdure.core.spec import parse_job_spec
from perdure.core.states import NodeState
from perdure.core.straggler import Straggler, drain


def job(mode: str) -> Job:
    spec = parse_job_spec(f"""
name: j
pools: [{{name: worker, replicas: 2, command: [python, t.py]}}]
watchdog: {{stragglers: {mode}}}
""")
    return Job("j-1", spec, "/tmp", 0.0, replicas=make_replicas(spec))


SLOW = Straggler("j-1", "worker-1", "b", "j-1.1.worker-1.1", 0.3, 0.1)
READY = {"a": Node("a", 1), "b": Node("b", 1)}


def test_a_straggler_on_a_ready_node_with_another_ready_has_its_node_drained() -> None:
    command, said = drain(job("drain"), SLOW, READY, 5.0)
    assert command == Command("drain-node", "b", 5.0)
    assert said.startswith("; draining node b: worker-1 moves at its next checkpoint")


@pytest.mark.parametrize(("mode", "nodes", "said"), [
    ("report", READY, ""),
    ("drain", {"a": Node("a", 1), "b": Node("b", 1, NodeState.DRAINING)},
     "; node b is not ready: nothing to drain"),
    ("drain", {"b": Node("b", 1)}, "; not drained: no other node is ready to take worker-1"),
    ("drain", {"a": Node("a", 1, NodeState.DOWN), "b": Node("b", 1)},
     "; not drained: no other node is ready to take worker-1"),
])
def test_no_drain_when_the_spec_only_reports_or_no_node_can_take_the_work(
        mode: str, nodes: dict[str, Node], said: str) -> None:
    assert drain(job(mode), SLOW, nodes, 5.0) == (None, said)
