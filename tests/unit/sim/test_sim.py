"""`perdure sim`: failure files, the training account and the real core on a simulated clock."""

from __future__ import annotations

import pytest

from perdure.core.spec import JobSpec
from perdure.core.specread import SpecError
from perdure.sim import calibration, failures, policies
from perdure.sim.calibration import Calibration
from perdure.sim.engine import Engine
from perdure.sim.failures import Category, Draw
from perdure.sim.training import Training

CAL = Calibration(step_seconds=1.0, launch_cold_seconds=60, launch_warm_seconds=5,
                  stop_seconds=1, rendezvous_seconds=10, save_blocking_seconds=2,
                  persist_seconds=10, restore_disk_seconds=20, restore_local_seconds=1,
                  restore_peer_seconds=3, snapshot_blocking_seconds=0.1,
                  snapshot_every_steps=10, nccl_timeout_seconds=600,
                  manual_restart_seconds=3600)
NODES = {f"n{i}": (8, 0) for i in range(6)}


def spec(**restart: int) -> JobSpec:
    return JobSpec.model_validate({
        "name": "big", "pools": [{"name": "w", "replicas": 4, "slots": 8,
                                  "command": ["python", "t.py"]}],
        "restart": restart, "checkpoint": {"every_seconds": 100}})


def cat(**kw: object) -> Category:
    return Category.model_validate({"name": "x", "per_gpu_day": 0.0, **kw})


def run(policy: str, draws: list[Draw], hours: float = 2.0, **restart: int):  # type: ignore[no-untyped-def]
    return Engine(spec(**restart), NODES, draws, CAL, policies.POLICIES[policy],
                  hours * 3600).run()


def test_llama3_is_table_5() -> None:
    f = failures.load("llama3")
    assert f.reference is not None and f.reference.gpus == 16384
    assert sum(c.count or 0 for c in f.categories) == 419
    gpu_days = 16384 * 54
    assert sum(f.rate(c) for c in f.categories) * gpu_days == pytest.approx(419)
    got = list(failures.Draws(f, 16384, 2048, 54 * 86400, seed=1))
    assert 419 * 0.85 < len(got) < 419 * 1.15  # a Poisson draw of the same rates
    assert [d.time for d in got] == sorted(d.time for d in got)
    assert got == list(failures.Draws(f, 16384, 2048, 54 * 86400, seed=1))  # the same again


def test_failures_are_drawn_as_the_simulation_meets_them() -> None:
    # 50,000 failures: drawn and dropped one by one, never held all at once
    import tracemalloc

    f = failures.FailureFile.model_validate({"categories": [
        {"name": "a", "per_gpu_day": 1.0, "scope": "gpu", "kind": "transient"},
        {"name": "b", "per_gpu_day": 2.0, "scope": "node", "kind": "hardware"}]})
    assert failures.expected(f, 1000, 100 * 86400 / 6) == pytest.approx(50_000)
    tracemalloc.start()
    try:
        got = failures.Draws(f, 1000, 125, 100 * 86400 / 6, seed=4)
        count, last = 0, 0.0
        for d in got:
            assert d.time >= last
            count, last = count + 1, d.time
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0.95 * 50_000 < count < 1.05 * 50_000
    assert peak < 1 << 20, peak  # a list of them took ~10 MB


def test_a_rate_over_the_cap_is_refused_naming_its_field() -> None:
    f = failures.FailureFile.model_validate({"categories": [
        {"name": "a", "per_gpu_day": 0.001, "scope": "gpu", "kind": "transient"},
        {"name": "storm", "mtbf_hours": 0.001, "scope": "gpu", "kind": "transient"}]})
    with pytest.raises(ValueError, match=r"^ff.yaml: categories\.1\.mtbf_hours \(storm: 0.001\) "
                       r".* at most 1,000,000 .*: lower the rate, --days or the job's GPUs$"):
        failures.check_expected(f, 1024, 86400.0, "ff.yaml")
    failures.check_expected(f, 1, 86400.0, "ff.yaml")  # 24,000: fine


def test_failure_file_errors_name_the_field(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "f.yaml"
    bad.write_text("categories:\n  - {name: a, count: 3, mtbf_hours: 5, scope: gpu, "
                   "kind: transient}\n")
    with pytest.raises(SpecError, match="exactly one of count, per_gpu_day, mtbf_hours"):
        failures.load(str(bad))
    bad.write_text("categories:\n  - {name: a, mtbf_hours: 5, scope: rack, kind: transient}\n")
    with pytest.raises(SpecError, match=r"categories\.0\.scope"):
        failures.load(str(bad))
    with pytest.raises(SpecError, match="llama3"):
        failures.load(str(tmp_path / "missing.yaml"))
    assert calibration.load("h100-405b").step_seconds > 0


def test_an_unknown_field_in_a_failure_or_calibration_file_is_named(  # type: ignore[no-untyped-def]
        tmp_path) -> None:
    bad = tmp_path / "f.yaml"
    bad.write_text("categories:\n  - {name: a, mtbf_hours: 5, scope: gpu, kind: transient, "
                   "detecton_s: 3}\n")
    with pytest.raises(SpecError, match=r"categories\.0\.detecton_s: unknown field"):
        failures.load(str(bad))
    bad.write_text("step_secnds: 1\n")
    with pytest.raises(SpecError, match=r"step_secnds: unknown field; did you mean `step_seconds`"):
        calibration.load(str(bad))
    for load in (failures.load, calibration.load):  # read whole, these would never end
        with pytest.raises(SpecError, match="/dev/zero: larger than the 524288 bytes"):
            load("/dev/zero")


def test_training_account_is_exact() -> None:
    t = Training(CAL, snapshots=False)
    t0, source = t.start(0.0, every_seconds=100, node_lost=False)
    assert (t0, source) == (10.0, "the beginning")  # rendezvous only
    # cycles of 100 steps + 2 s blocked; the first save is durable at 10+102+10 = 122
    trained = t.interrupt(10 + 102 * 2 + 50, keeps_snapshot=True)
    assert trained == 254
    assert t.durable_step == 200 and t.step == 250
    steps = next(r for r in t.records if r["kind"] == "steps")
    assert (steps["first"], steps["last"], steps["seconds"]) == (1, 250, 250.0)
    saves = next(r for r in t.records if r["kind"] == "checkpoint_save")
    assert saves["seconds"] == 4.0
    t.records.clear()
    _, source = t.start(300.0, 100, node_lost=False)
    assert source == "checkpoint" and t.records[0] == {
        "kind": "restore", "step": 200, "seconds": 20.0, "t": 330.0}


def test_a_crash_costs_what_the_policy_says() -> None:
    crash = cat(scope="gpu", kind="transient", detect_seconds=5)
    draws = [Draw(1800.0, crash, 1)]
    cr, best = run("checkpoint-restart", draws), run("perdure-best", draws)
    for r in (cr, best):
        assert r.counts.interruptions == 1 and r.counts.restarts == 1
        assert r.counts.retries == 0 and r.counts.manual == 0
    # checkpoint-restart saves every 3 h: the 1,700 s trained before the crash are lost
    assert cr.goodput.badput["wasted_progress"] == pytest.approx(1800 - 60 - 10, abs=3)
    assert best.goodput.badput["wasted_progress"] < 30  # a snapshot every few steps
    assert best.counts.restores == {"the beginning": 1, "node-local snapshot": 1}
    assert best.ettr > cr.ettr


def test_a_hang_is_a_retry_under_nccl_and_a_restart_under_the_watchdog() -> None:
    hang = cat(scope="gpu", kind="transient", hang=True)
    draws = [Draw(1800.0, hang, 0)]
    cr = run("checkpoint-restart", draws)
    assert cr.counts.retries == 1 and cr.counts.restarts == 0
    dflt = run("perdure-default", draws)
    assert dflt.counts.restarts == 1 and dflt.counts.retries == 0
    # detected at the watchdog's floor (120 s), not NCCL's 600 s
    assert dflt.goodput.badput["recovery"] < cr.goodput.badput["recovery"] - 400


def test_a_lost_node_is_replaced_without_spending_a_restart() -> None:
    gpu = cat(scope="gpu", kind="hardware", detect_seconds=10, repair_hours=100)
    r = run("perdure-default", [Draw(1800.0, gpu, 2)])
    assert r.counts.node_losses == 1 and r.counts.manual == 0
    assert r.goodput.productive > 0.8 * 7200


def test_a_failed_job_needs_a_person() -> None:
    hang = cat(scope="gpu", kind="transient", hang=True)
    r = run("checkpoint-restart", [Draw(1000.0, hang, 0)], hours=3, max_job_retries=0)
    assert r.counts.manual == 1
    assert r.goodput.badput["manual"] == 3600
    assert r.goodput.productive > 0  # resubmitted, it trained again after the wait


def test_a_save_waits_for_the_previous_persist_when_the_interval_is_shorter() -> None:
    t = Training(CAL, snapshots=False)  # persist 10 s, blocking 2 s, 1 s steps
    t.start(0.0, every_seconds=4, node_lost=False)
    assert t.save_wait(4) == 6.0 and t.save_wait(100) == 0.0
    # cycles of 4 steps + 6 s waiting for the persist + 2 s copying: 3 cycles in 36 s
    t.interrupt(10 + 36, keeps_snapshot=True)
    saves = next(r for r in t.records if r["kind"] == "checkpoint_save")
    assert saves["seconds"] == 24.0 and t.step == 12
    assert t.durable_step == 8  # the third save is still persisting


def test_snapshots_outlive_a_lost_node_only_through_a_peer_that_survives() -> None:
    gpu = cat(scope="gpu", kind="hardware", detect_seconds=10, repair_hours=100)
    switch = cat(scope="switch", kind="hardware", detect_seconds=10, repair_hours=100)
    best = run("perdure-best", [Draw(1800.0, gpu, 2)])
    local = run("perdure-node-snapshots", [Draw(1800.0, gpu, 2)])
    assert best.counts.restores.get("peer snapshot") == 1
    assert local.counts.restores.get("checkpoint") == 1 and "peer snapshot" not in \
        local.counts.restores
    # a switch takes neighbouring nodes; the peers are half the ring away (n0 -> n2, n1 -> n3
    # of the 4 running the job): a switch of 2 leaves them, a switch of 3 takes n0 and n2
    for width, source in ((2, "peer snapshot"), (3, "checkpoint")):
        nodes = {f"n{i}": (8, 0) for i in range(10)}  # room for 3 replacements
        e = Engine(spec(), nodes, [Draw(1800.0, switch, 0)], CAL,
                   policies.POLICIES["perdure-best"], 7200.0, switch_nodes=width)
        r = e.run()
        assert r.counts.restores.get(source) == 1, (width, r.counts.restores)
        assert (e.record.restores, e.record.from_checkpoint) == (1, source == "checkpoint")


def test_the_sim_feeds_restore_sources_to_the_same_interval_choice() -> None:
    crash = cat(scope="gpu", kind="transient", detect_seconds=5)
    draws = [Draw(600.0 * k, crash, k) for k in range(1, 12)]
    engines = {p: Engine(spec(), NODES, draws, CAL, policies.POLICIES[p], 7200.0)
               for p in ("perdure-best", "perdure-node-snapshots")}
    for e in engines.values():
        e.run()
        # the start from scratch says nothing; 11 restores from node-local snapshots
        assert (e.record.restores, e.record.from_checkpoint) == (11, 0)
        chosen = e.interval_seconds()
        assert chosen > 2 * iv_without_restores(e)  # share 1/12: sqrt(12) = 3.5x longer


def iv_without_restores(e: Engine) -> float:
    from dataclasses import replace

    from perdure.core import interval

    plain = replace(e.record, restores=0, from_checkpoint=0)
    return interval.choose(plain, e.cluster, e.spec.checkpoint.max_interval_seconds).seconds
