"""Goodput arithmetic: productive step time over wall time, and the badput by category.

No side effects: the primary's progress records and the job's state timeline in, the account
out. Categories follow Google's ml-goodput-measurement (CATEGORIES); time queued and suspended
does not count against goodput.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Record = Mapping[str, Any]


@dataclass(frozen=True)
class LaunchReport:
    launched: float  # when the controller launched the process
    ended: float | None  # when it exited (None: still running)
    records: Sequence[Record]


@dataclass
class Goodput:
    wall: float = 0.0
    queued: float = 0.0
    suspended: float = 0.0
    productive: float = 0.0
    badput: dict[str, float] = field(default_factory=dict)
    last_step: int | None = None
    total_steps: int | None = None  # what the script said the run has (goodput.total)
    steps_per_second: float | None = None  # over the last RATE_WINDOW s of steps reported

    @property
    def running(self) -> float:
        return max(0.0, self.wall - self.queued - self.suspended)

    @property
    def reported(self) -> bool:
        """Whether the script reported any step (else there is no goodput to show)."""
        return self.last_step is not None

    @property
    def goodput(self) -> float | None:
        if not self.reported:
            return None
        return self.productive / self.running if self.running > 0 else None

    @property
    def status(self) -> str:
        """`no progress reported`, `not started` or the goodput as a percentage."""
        if self.running <= 0:
            return "not started"
        value = self.goodput
        return NO_PROGRESS if value is None else f"{value:.1%}"

    @property
    def eta_seconds(self) -> float | None:
        """Seconds to the last step at the recent rate (None without a total or a rate)."""
        if self.total_steps is None or self.last_step is None or not self.steps_per_second:
            return None
        return max(0, self.total_steps - self.last_step) / self.steps_per_second

    def to_json(self) -> dict[str, Any]:
        return {
            "goodput": self.goodput, "status": self.status,
            "productive_seconds": self.productive,
            "wall_seconds": self.wall, "queued_seconds": self.queued,
            "suspended_seconds": self.suspended, "badput_seconds": dict(self.badput),
            "last_step": self.last_step, "total_steps": self.total_steps,
            "steps_per_second": self.steps_per_second, "eta_seconds": self.eta_seconds,
        }


NO_PROGRESS = "no progress reported"
RATE_WINDOW = 30.0


CATEGORIES = ("startup", "checkpoint_save", "checkpoint_restore", "data_loading",
              "wasted_progress", "elastic", "recovery")


def state_durations(timeline: Sequence[tuple[float, str]], now: float) -> dict[str, float]:
    """Seconds spent in each job state, from (time, state) transitions in order."""
    out: dict[str, float] = {}
    if not timeline:  # a job no controller has touched yet
        return out
    for (t, state), nxt in zip(timeline, [*timeline[1:], (now, "")], strict=True):
        out[state] = out.get(state, 0.0) + max(0.0, nxt[0] - t)
    return out


class _Ledger:
    """Step ranges whose work still counts; a restore to step c writes off what lies past c."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int, float]] = []
        self.wasted = 0.0

    def add(self, first: int, last: int, seconds: float) -> None:
        self.ranges.append((first, last, seconds))

    def rewind(self, to_step: int | None) -> None:
        keep_upto = -1 if to_step is None else to_step
        kept: list[tuple[int, int, float]] = []
        for first, last, seconds in self.ranges:
            if last <= keep_upto:
                kept.append((first, last, seconds))
                continue
            span = last - first + 1
            lost = last - max(keep_upto, first - 1)
            self.wasted += seconds * lost / span
            if lost < span:
                kept.append((first, keep_upto, seconds * (span - lost) / span))
        self.ranges = kept

    @property
    def total(self) -> float:
        return sum(s for _, _, s in self.ranges)


def account(launches: Sequence[LaunchReport], timeline: Sequence[tuple[float, str]],
            now: float) -> Goodput:
    """The goodput of a job from its primary's launches and its state timeline."""
    states = state_durations(timeline, now)
    g = Goodput(
        wall=max(0.0, (timeline[-1][0] if _ended(timeline) else now) - timeline[0][0])
        if timeline else 0.0,
        queued=states.get("QUEUED", 0.0),
        suspended=states.get("SUSPENDED", 0.0),
    )
    bad = dict.fromkeys(CATEGORIES, 0.0)
    ledger = _Ledger()
    recent: list[Record] = []
    for launch in sorted(launches, key=lambda x: x.launched):
        recent = []  # the rate is the newest launch's
        first_step_at: float | None = None
        restore_here = 0.0
        for rec in sorted(launch.records, key=lambda r: r.get("t", 0.0)):
            kind = rec.get("kind")
            if kind == "steps":
                ledger.add(int(rec["first"]), int(rec["last"]), float(rec["seconds"]))
                g.last_step = int(rec["last"])
                recent.append(rec)
                if first_step_at is None:
                    first_step_at = float(rec.get("t0", rec["t"]))
            elif kind == "total":
                g.total_steps = int(rec["steps"])
            elif kind == "restore":
                ledger.rewind(rec.get("step"))
                restore_here += float(rec["seconds"])
            elif kind == "checkpoint_save":
                bad["checkpoint_save"] += float(rec["seconds"])
            elif kind == "data_wait":
                bad["data_loading"] += float(rec["seconds"])
            elif kind == "elastic":
                bad["elastic"] += float(rec["seconds"])
        bad["checkpoint_restore"] += restore_here
        until = first_step_at if first_step_at is not None else (launch.ended or now)
        bad["startup"] += max(0.0, until - launch.launched - restore_here)
    g.productive = ledger.total
    g.steps_per_second = _rate(recent)
    bad["wasted_progress"] = ledger.wasted
    accounted = g.productive + sum(bad.values())
    bad["recovery"] = max(0.0, g.running - accounted)
    g.badput = bad
    return g


def _ended(timeline: Sequence[tuple[float, str]]) -> bool:
    return bool(timeline) and timeline[-1][1] in ("SUCCEEDED", "FAILED", "CANCELLED")


def _rate(steps: Sequence[Record]) -> float | None:
    """Steps per second of wall time over the newest RATE_WINDOW seconds of step records."""
    if not steps:
        return None
    end = float(steps[-1]["t"])
    window = [r for r in steps if float(r["t"]) >= end - RATE_WINDOW]
    begin = float(window[0].get("t0", window[0]["t"]))
    count = sum(int(r.get("count", int(r["last"]) - int(r["first"]) + 1)) for r in window)
    return count / (end - begin) if end > begin else None
