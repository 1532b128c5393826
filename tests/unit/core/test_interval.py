"""`checkpoint.every: auto` (core.interval) and the least-work preemption victim (hotswap)."""

from __future__ import annotations

import math

import pytest
from tests.helpers.sim import Sim, spec

from perdure.core import interval as iv
from perdure.core.events import ReplicaProgress
from perdure.core.states import JobState


def test_young_daly_with_the_prior_then_the_jobs_own_failures() -> None:
    rec, cluster = iv.JobRecord(), iv.Cluster()
    first = iv.choose(rec, cluster, 14400.0)
    assert first.cost == iv.DEFAULT_COST_SECONDS and first.mtbf == iv.PRIOR_MTBF_SECONDS
    assert first.seconds == pytest.approx(math.sqrt(2 * 1.0 * iv.PRIOR_MTBF_SECONDS), rel=0.01)
    for c in (0.4, 0.5, 0.6):
        iv.note_cost(rec, c)
    rec.failures, rec.seconds = 9, 1000.0
    cluster = iv.Cluster(failures=9, seconds=1000.0)
    chosen = iv.choose(rec, cluster, 14400.0)
    cluster_mtbf = (iv.PRIOR_MTBF_SECONDS + 1000.0) / 10
    assert chosen.mtbf == (cluster_mtbf + 1000.0) / 10 and chosen.cost == 0.5
    assert chosen.seconds == pytest.approx(math.sqrt(2 * 0.5 * chosen.mtbf), rel=0.05)
    assert "median of 3 saves" in chosen.explain() and "9 failures" in chosen.explain()
    assert iv.changed(first, chosen) and not iv.changed(chosen, chosen)


def test_the_interval_is_bounded_by_the_ceiling_and_the_save_itself() -> None:
    assert iv.young_daly(1.0, 1e9, 14400.0) == 14400.0
    assert iv.young_daly(50.0, 1.0, 14400.0) == 50.0


def test_dalys_correction_shortens_the_interval_when_saves_are_costly() -> None:
    # C = 2.7 s against an MTBF of 60 s: Young says 18.0 s, Daly 16.2 s
    assert iv.young_daly(2.7, 60.0, 14400.0) == pytest.approx(16.2, abs=0.1)
    assert iv.young_daly(0.01, 86400.0, 14400.0) == pytest.approx(41.6, abs=0.1)


def test_among_equally_low_jobs_the_one_losing_least_work_is_preempted() -> None:
    sim = Sim(nodes={"a": 2, "b": 2, "c": 1})
    one = [{"name": "worker", "replicas": 1, "command": ["python", "t.py"]}]
    high = sim.submit(spec(name="high", priority=10, pools=[{**one[0], "replicas": 2}]))
    sim.run_until(high, {JobState.RUNNING})
    low = [sim.submit(spec(name=f"low{i}", priority=1, pools=one)) for i in range(3)]
    for j in low:
        sim.run_until(j, {JobState.RUNNING})
    sim.now += 600.0
    for j in low[1:]:  # these two checkpointed a moment ago; low0 (first in line) 600 s ago
        lid = sim.job(j).replicas[0].launch_id or ""
        sim.pending.append(ReplicaProgress(lid, 10, sim.now, save_seconds=0.2))
    sim.step()
    node = sim.job(high).replicas[0].node
    assert node is not None
    sim.command("fail-node", node)
    for _ in range(30):
        sim.step()
    assert sim.job(high).state is JobState.RUNNING
    assert sim.job(low[0]).state is JobState.RUNNING  # it would have lost the most
    assert sorted(sim.job(j).state.value for j in low[1:]) == ["QUEUED", "RUNNING"]
    message = next(m for m in sim.messages(high) if m.startswith("hot-swap: preempting"))
    assert "of 3 jobs at priority 1 it loses least work: 0 slot-seconds" in message, message


def test_a_hang_restarts_the_group_charged_to_the_laggard_then_retries_as_hang() -> None:
    from perdure.core.events import Hung

    sim = Sim(nodes={"a": 4})
    pools = [{"name": "worker", "replicas": 2, "command": ["python", "t.py"]}]
    j = sim.submit(spec(name="hung", pools=pools, restart={"max_replica_restarts": 1}))
    for expected in ("restart worker-1 hung: hang, restart 1 of 1",
                     "retry job: worker-1 hung: hang, restarts exhausted (1), job retry 1 of"):
        sim.run_until(j, {JobState.RUNNING})
        lid = sim.job(j).replicas[1].launch_id or ""
        sim.pending.append(Hung(lid, sim.now, "Replica worker-1 hung: ...", "HANG: worker-1"))
        sim.step()
        assert any(m.startswith(expected) for m in sim.messages(j)), sim.messages(j)
    job = sim.job(j)
    assert job.error is not None and job.error.code.value == "HANG"
    assert job.retries == {"HANG": 1}
