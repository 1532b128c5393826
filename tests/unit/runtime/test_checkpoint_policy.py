"""SavePolicy decisions, transition by transition, with time passed in."""

from __future__ import annotations

import pytest

from perdure.runtime.checkpoint import OnBusy, SavePolicy


@pytest.mark.parametrize(
    ("policy", "step", "now", "last_step", "last_time", "save"),
    [
        (SavePolicy(every_steps=10), 10, 0.0, None, 0.0, True),
        (SavePolicy(every_steps=10), 11, 0.0, 10, 0.0, False),
        (SavePolicy(every_steps=10), 10, 0.0, 10, 0.0, False),  # already saved this step
        (SavePolicy(every_seconds=60), 3, 59.0, None, 0.0, False),
        (SavePolicy(every_seconds=60), 3, 60.0, None, 0.0, True),
        (SavePolicy(every_seconds=60), 3, 61.0, 3, 0.0, False),
        (SavePolicy(every_steps=100, every_seconds=60), 7, 90.0, 1, 0.0, True),
        (SavePolicy(every_steps=100, every_seconds=60), 100, 1.0, 99, 0.0, True),
        (SavePolicy(), 100, 1e9, None, 0.0, False),
    ],
)
def test_decide(
    policy: SavePolicy, step: int, now: float, last_step: int | None, last_time: float, save: bool
) -> None:
    decision = policy.decide(step, now, last_step, last_time)
    assert decision.save is save and decision.reason


def test_on_busy_accepts_strings_and_rejects_nonsense() -> None:
    assert SavePolicy(on_busy="skip").on_busy is OnBusy.SKIP
    with pytest.raises(ValueError, match="on_busy is 'later'; it must be 'wait' or 'skip'"):
        SavePolicy(on_busy="later")
    with pytest.raises(ValueError, match="every_steps is 0"):
        SavePolicy(every_steps=0)
    with pytest.raises(ValueError, match="every_seconds is -1"):
        SavePolicy(every_seconds=-1)


def test_due_is_due_by_steps_or_by_clock() -> None:
    both = SavePolicy(every_steps=10, every_seconds=60)
    assert both.due_by_steps(20, 19) and not both.due_by_steps(20, 20)
    assert not both.due_by_clock(7, 59.0, 1, 0.0) and both.due_by_clock(7, 60.0, 1, 0.0)
    assert not both.due_by_clock(7, 60.0, 7, 0.0)  # this step was saved already
    assert not both.due_by_clock(7, 1e9, None, None)  # the first timed save waits
    for step, now, last in ((20, 1.0, 3), (7, 61.0, 3), (7, 1.0, 3)):
        assert both.due(step, now, last, 0.0) == both.decide(step, now, last, 0.0).save
