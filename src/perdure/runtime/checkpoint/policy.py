"""When to save: every N steps and/or every T seconds, and what to do when a save is in flight.

A policy only decides; the Checkpointer acts. No side effects, no clock reads: time is passed in.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OnBusy(enum.Enum):
    """What a save does when the previous one is still persisting: WAIT for its commit (no
    save is lost), or SKIP this save (training never waits for storage)."""

    WAIT = "wait"
    SKIP = "skip"


@dataclass(frozen=True)
class SaveDecision:
    """The policy's answer for one step: save or not, and why (for logs and goodput)."""

    save: bool
    reason: str


@dataclass(frozen=True)
class SavePolicy:
    """Save every ``every_steps`` steps and/or every ``every_seconds`` seconds.

    With both set, a save happens when either is due. With neither set, ``decide`` never saves
    (explicit ``Checkpointer.save`` calls still do). ``on_busy`` applies to every save.
    """

    every_steps: int | None = None
    every_seconds: float | None = None
    on_busy: OnBusy = OnBusy.WAIT

    def __post_init__(self) -> None:
        if self.every_steps is not None and (
            not isinstance(self.every_steps, int) or self.every_steps < 1
        ):
            raise ValueError(
                f"SavePolicy.every_steps is {self.every_steps!r}; it must be an int >= 1 or None."
            )
        if self.every_seconds is not None and not self.every_seconds > 0:
            raise ValueError(
                f"SavePolicy.every_seconds is {self.every_seconds!r}; it must be > 0 or None."
            )
        if not isinstance(self.on_busy, OnBusy):
            try:
                object.__setattr__(self, "on_busy", OnBusy(self.on_busy))
            except ValueError:
                raise ValueError(
                    f"SavePolicy.on_busy is {self.on_busy!r}; it must be 'wait' or 'skip'."
                ) from None

    def due(self, step: int, now: float, last_step: int | None, last_time: float | None) -> bool:
        """Whether ``step`` is due: `decide` without its reason (called every step)."""
        return (self.due_by_steps(step, last_step)
                or self.due_by_clock(step, now, last_step, last_time))

    def due_by_steps(self, step: int, last_step: int | None) -> bool:
        """Due by ``every_steps`` (the same answer on every rank)."""
        return self.every_steps is not None and step % self.every_steps == 0 \
            and step != last_step

    def due_by_clock(
        self, step: int, now: float, last_step: int | None, last_time: float | None
    ) -> bool:
        """Due by ``every_seconds`` (by this process's clock: ranks must agree on it)."""
        return (self.every_seconds is not None and last_time is not None
                and step != last_step and now - last_time >= self.every_seconds)

    def decide(
        self, step: int, now: float, last_step: int | None, last_time: float | None
    ) -> SaveDecision:
        """Decide whether ``step`` is due, given the last save's step and time (None: none yet)."""
        if self.due_by_steps(step, last_step):
            return SaveDecision(True, f"step {step} is a multiple of {self.every_steps}")
        if self.due_by_clock(step, now, last_step, last_time):
            return SaveDecision(True, f"{now - (last_time or now):.1f}s since the last save >= "
                                      f"{self.every_seconds}s")
        if self.every_seconds is not None and last_time is None:
            return SaveDecision(False, "first timed save waits one interval")
        return SaveDecision(False, "not due")
