"""Repeat offenders in `perdure sim`: the lemons' share of the failures, and the real core's
quarantine (core/health.py) taking a lemon out until its deep repair."""

from __future__ import annotations

import dataclasses

import pytest
from test_sim import CAL

from perdure.core.spec import JobSpec
from perdure.sim import failures, policies
from perdure.sim.engine import FENCED_REPAIR_HOURS, Engine, Result
from perdure.sim.failures import Category, Draw


def test_llama3_lemons_keeps_table_5_and_concentrates_hardware_failures() -> None:
    f = failures.load("llama3-lemons")
    assert f.repeat_offenders is not None
    assert sum(c.count or 0 for c in f.categories) == 419  # the same interruptions in all
    odds = f.repeat_offenders.lemon_odds()
    assert odds == pytest.approx(0.5 / 1.49)  # 1% of nodes at 50x the rate
    got = failures.Draws(f, 16384, 2080, 54 * 86400, seed=3)
    hardware = [d for d in got if d.category.kind == "hardware"]
    assert abs(sum(d.lemon for d in hardware) / len(hardware) - odds) < 0.08
    assert not any(d.lemon for d in got if d.category.kind == "transient")
    names = [f"n{i:04d}" for i in range(2080)]
    lemons = failures.lemon_nodes(f, names, seed=3)
    assert len(lemons) == 21 and lemons == failures.lemon_nodes(f, names, seed=3)
    # a file without repeat offenders draws as it always did
    plain = failures.load("llama3")
    assert failures.lemon_nodes(plain, names, 3) == set()
    assert not any(d.lemon for d in failures.Draws(plain, 16384, 2048, 86400, seed=3))


NODES = {f"n{i}": (8, 0) for i in range(5)}  # 4 for the job, 1 free


def run(fencing: bool, draws: list[Draw], hours: float) -> tuple[Result, Engine]:
    spec = JobSpec.model_validate({
        "name": "big", "pools": [{"name": "w", "replicas": 4, "slots": 8,
                                  "command": ["python", "t.py"]}],
        "checkpoint": {"every_seconds": 600}})
    policy = dataclasses.replace(policies.POLICIES["perdure-default"], fencing=fencing)
    engine = Engine(spec, NODES, draws, CAL, policy, hours * 3600,
                    lemons=frozenset({"n0"}), lemon_kinds=frozenset({"hardware"}))
    return engine.run(), engine


def test_a_lemon_that_fails_twice_is_quarantined_until_its_deep_repair() -> None:
    hw = Category.model_validate({"name": "gpu", "per_gpu_day": 0.0, "scope": "gpu",
                                  "kind": "hardware", "detect_seconds": 10,
                                  "repair_hours": 0.1})
    draws = [Draw(600.0, hw, 0, lemon=True),  # n0 lost: its replica goes to n4
             Draw(1800.0, hw, 0),  # n1 lost: its replica goes to n0, back from repair
             Draw(3600.0, hw, 0, lemon=True),  # n0's second failure within the week
             Draw(5400.0, hw, 0, lemon=True)]
    fenced, engine = run(True, draws, hours=FENCED_REPAIR_HOURS + 3)
    unfenced, plain = run(False, draws, hours=FENCED_REPAIR_HOURS + 3)
    assert fenced.counts.fenced == 1 and unfenced.counts.fenced == 0
    assert fenced.counts.lemon_hits == 2  # the third finds n0 out of the job
    assert "n0" not in engine.lemons and "n0" in plain.lemons  # repaired after quarantine
    node = engine.snap.nodes["n0"]
    assert not node.fence and node.schedulable  # restored by the deep repair
