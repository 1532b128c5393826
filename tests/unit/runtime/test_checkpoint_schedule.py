"""maybe_save's schedule: the spec's settings from the environment, the published interval,
and the notice agreement on one rank (runtime.checkpoint.schedule)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perdure.runtime.checkpoint import schedule
from perdure.runtime.checkpoint.comm import Comm
from perdure.runtime.checkpoint.policy import SavePolicy


def test_policy_follows_the_spec_settings_in_the_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in (schedule.ENV_STEPS, schedule.ENV_SECONDS, schedule.ENV_INTERVAL_FILE):
        monkeypatch.delenv(var, raising=False)
    assert schedule.policy_from_env() == (SavePolicy(), None)
    monkeypatch.setenv(schedule.ENV_STEPS, "20")
    assert schedule.policy_from_env()[0].every_steps == 20
    path = tmp_path / "interval.json"
    monkeypatch.setenv(schedule.ENV_INTERVAL_FILE, str(path))
    policy, followed = schedule.policy_from_env()
    assert followed == str(path) and policy.every_seconds == schedule.FIRST_INTERVAL_SECONDS
    path.write_text(json.dumps({"seconds": 42.5}))
    s = schedule.SaveSchedule(str(path))
    refreshed = s.refresh(policy, now=10.0)
    assert refreshed.every_seconds == 42.5
    path.write_text(json.dumps({"seconds": 7.0}))
    assert s.refresh(refreshed, now=11.0).every_seconds == 42.5  # read every few seconds
    assert s.refresh(refreshed, now=10.0 + schedule.REFRESH_SECONDS).every_seconds == 7.0


def test_a_bad_number_in_the_environment_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(schedule.ENV_NOTICE_WITHIN, "-1")
    with pytest.raises(ValueError, match="PERDURE_NOTICE_WITHIN=-1"):
        schedule.notice_within()
    monkeypatch.setenv(schedule.ENV_STEPS, "often")
    with pytest.raises(ValueError, match="PERDURE_CHECKPOINT_EVERY='often' is not a number"):
        schedule.policy_from_env()


def test_on_one_rank_the_notice_is_seen_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from perdure.runtime import context

    comm = Comm(5.0)
    s = schedule.SaveSchedule(None)
    assert s.decide(False, False, lambda: comm) == (False, False)
    ctx = context.Context(0, 1, 0, "j", "worker-0", 1, 0, None)
    monkeypatch.setattr(context, "_context", ctx)
    ctx._stop.set()
    assert s.decide(True, False, lambda: comm) == (True, True)
