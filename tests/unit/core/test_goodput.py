"""Goodput arithmetic: productive time, each badput category, queued and suspended apart."""

from __future__ import annotations

import pytest

from perdure.core.goodput import LaunchReport, account, state_durations


def steps(t: float, first: int, last: int, seconds: float,
          t0: float | None = None) -> dict[str, object]:
    return {"kind": "steps", "t": t, "t0": t - seconds if t0 is None else t0, "first": first,
            "last": last, "seconds": seconds}


def test_state_durations() -> None:
    d = state_durations([(0, "QUEUED"), (5, "PENDING"), (6, "RUNNING"), (10, "SUSPENDED"),
                         (12, "QUEUED"), (13, "RUNNING")], now=20)
    assert d == {"QUEUED": 6, "PENDING": 1, "RUNNING": 11, "SUSPENDED": 2}


def test_a_job_the_controller_has_not_seen_yet_has_no_goodput() -> None:
    assert state_durations([], now=20) == {}
    assert account([], [], now=20).goodput is None


def test_uninterrupted_run() -> None:
    timeline = [(0.0, "QUEUED"), (2.0, "PENDING"), (3.0, "RUNNING"), (30.0, "SUCCEEDED")]
    launch = LaunchReport(2.0, 30.0, [
        steps(10.0, 0, 49, 5.0),
        {"kind": "checkpoint_save", "t": 10.5, "step": 49, "seconds": 0.5},
        steps(30.0, 50, 99, 18.0),
    ])
    g = account([launch], timeline, now=40.0)
    assert g.wall == 30.0 and g.queued == 2.0 and g.running == 28.0
    assert g.productive == pytest.approx(23.0)
    assert g.badput["startup"] == pytest.approx(3.0)  # launched at 2, first step began at 5
    assert g.badput["checkpoint_save"] == 0.5
    assert g.badput["wasted_progress"] == 0.0
    assert g.goodput == pytest.approx(23.0 / 28.0)
    assert g.last_step == 99


def test_restore_writes_off_the_steps_past_the_checkpoint() -> None:
    timeline = [(0.0, "PENDING"), (100.0, "SUCCEEDED")]
    first = LaunchReport(0.0, 40.0, [steps(20.0, 0, 99, 20.0), steps(40.0, 100, 199, 20.0)])
    second = LaunchReport(45.0, 100.0, [
        {"kind": "restore", "t": 50.0, "step": 149, "seconds": 2.0},
        steps(100.0, 150, 299, 30.0, t0=50.0),
    ])
    g = account([first, second], timeline, now=100.0)
    assert g.badput["wasted_progress"] == pytest.approx(10.0)  # steps 150..199 of launch 1
    assert g.badput["checkpoint_restore"] == 2.0
    assert g.productive == pytest.approx(20.0 + 10.0 + 30.0)
    assert g.badput["startup"] == pytest.approx(3.0)  # launched 45, restored 2 s, stepped at 50


def test_suspended_time_is_apart() -> None:
    timeline = [(0.0, "RUNNING"), (10.0, "SUSPENDED"), (50.0, "QUEUED"), (51.0, "RUNNING"),
                (60.0, "SUCCEEDED")]
    g = account([], timeline, now=60.0)
    assert g.suspended == 40.0 and g.queued == 1.0 and g.running == 19.0
    assert g.badput["recovery"] == 19.0
    assert g.goodput is None and g.status == "no progress reported"  # no step reported


def test_elastic_rebuilds_are_their_own_badput() -> None:
    # a survivor: trains, loses a peer, rebuilds its group in 0.5 s, trains on in the same process
    timeline = [(0.0, "RUNNING"), (20.0, "SUCCEEDED")]
    launch = LaunchReport(0.0, 20.0, [
        steps(8.0, 0, 49, 7.0),
        {"kind": "elastic", "t": 8.6, "round": 1, "world_size": 3, "seconds": 0.5},
        steps(20.0, 50, 149, 11.0),
    ])
    g = account([launch], timeline, now=20.0)
    assert g.badput["elastic"] == 0.5 and g.badput["wasted_progress"] == 0.0
    assert g.badput["startup"] == pytest.approx(1.0)
    assert g.badput["recovery"] == pytest.approx(20.0 - 18.0 - 0.5 - 1.0)


def test_total_rate_and_eta_come_from_the_newest_records() -> None:
    from perdure.core.goodput import LaunchReport

    records = [{"kind": "total", "t": 0.5, "steps": 6000},
               {"kind": "steps", "t": 10.0, "t0": 0.0, "first": 1, "last": 100,
                "seconds": 9.0, "count": 100},
               {"kind": "steps", "t": 20.0, "t0": 10.0, "first": 101, "last": 160,
                "seconds": 9.0, "count": 60}]
    g = account([LaunchReport(0.0, None, records)], [(0.0, "RUNNING")], now=20.0)
    assert (g.last_step, g.total_steps) == (160, 6000)
    assert g.steps_per_second == 8.0  # 160 steps in the 20 s the window holds
    assert g.eta_seconds == (6000 - 160) / 8.0
    assert g.status == "90.0%" and g.to_json()["total_steps"] == 6000

