"""Hung-job detection: no rank of a running job advanced for `hang_seconds`.

No side effects: `now` is passed in. The shell captures the ranks' stacks for each `Suspect`
and hands them to `verdict`, which names the laggard. Each round's clock starts at its first
reported step: a slow first step (compile, a restore) is no hang, nor is a job that reports
no progress at all.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

from perdure.core.events import ReplicaProgress
from perdure.core.model import Job
from perdure.core.policy import Action, Verdict
from perdure.core.stacks import StackSummary
from perdure.core.states import ErrorCode, JobState, ReplicaState

AUTO_FLOOR_SECONDS = 120.0
AUTO_P99_FACTOR = 20.0
STEP_TIMES_KEPT = 2000  # per job: enough for a stable p99, bounded memory


@dataclass
class _Round:
    """What one round of a job (a fixed set of launches) reported."""

    launches: frozenset[str]
    steps: dict[str, int | None]  # launch id -> latest step
    first_step_at: float | None = None
    last_progress: float | None = None
    suspected: bool = False


@dataclass
class _JobWatch:
    round: _Round
    step_times: list[float] = field(default_factory=list)  # seconds per step, all rounds


@dataclass(frozen=True)
class RankAt:
    """Where one rank was when its job was found stalled."""

    replica: str
    launch_id: str
    step: int | None


@dataclass(frozen=True)
class Suspect:
    """A job whose ranks all stopped advancing: capture their stacks, then call `verdict`."""

    job_id: str
    attempt: int
    stalled_for: float
    hang_seconds: float
    ranks: tuple[RankAt, ...]


@dataclass(frozen=True)
class HangVerdict:
    """Who is blamed for a hang (the laggard), why, and where every rank was."""

    laggard: RankAt
    reason: str  # why this rank: outside the collective, lowest step, or no rank stood out
    message: str  # the HANG error message a user sees
    where: tuple[str, ...]  # one line per rank: `worker-1 step 6: in sleep (train.py:40)`


_LAUNCH_ID = operator.attrgetter("launch_id")


def steady(job: Job) -> bool:
    """Whether every replica of `job` runs, in a round not being stopped."""
    return (job.state is JobState.RUNNING and job.after_stop is None
            and job.count(ReplicaState.RUNNING) == len(job.replicas))


def running_launches(job: Job) -> frozenset[str] | None:
    """The launches of a job whose every replica runs (None: not a steady running round)."""
    if not steady(job):
        return None
    launches = list(map(_LAUNCH_ID, job.replicas))
    return None if None in launches else frozenset(launches)


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


class Watchdog:
    """Per job: the current round's progress and the step times seen so far."""

    def __init__(self) -> None:
        self.jobs: dict[str, _JobWatch] = {}

    def progress(self, job: Job, obs: ReplicaProgress) -> None:
        launches = running_launches(job)
        if launches is None or obs.launch_id not in launches or obs.step is None:
            return  # a note without a step says nothing of where training is
        watch = self._watch(job.id, launches)
        rnd = watch.round
        rnd.steps[obs.launch_id] = obs.step
        if obs.steps and obs.step_seconds is not None:
            watch.step_times.extend([obs.step_seconds] * min(obs.steps, 50))
            del watch.step_times[:-STEP_TIMES_KEPT]
        if obs.steps and rnd.first_step_at is None:
            rnd.first_step_at = obs.time
        rnd.last_progress = obs.time
        rnd.suspected = False

    def _watch(self, job_id: str, launches: frozenset[str]) -> _JobWatch:
        watch = self.jobs.get(job_id)
        if watch is None:
            watch = self.jobs[job_id] = _JobWatch(_Round(launches, {}))
        elif watch.round.launches != launches:
            watch.round = _Round(launches, {})
        return watch

    def hang_seconds(self, job: Job) -> float:
        """The job's threshold: the spec's number, or auto from its step times."""
        given = job.spec.watchdog.hang_seconds
        if given != "auto":
            return float(given)
        watch = self.jobs.get(job.id)
        tail = p99(watch.step_times) if watch is not None else None
        return max(AUTO_FLOOR_SECONDS, AUTO_P99_FACTOR * (tail or 0.0))

    def check(self, jobs: Mapping[str, Job], now: float) -> list[Suspect]:
        """Jobs stalled for longer than their `hang_seconds`, each reported once per stall."""
        out = []
        for job_id in list(self.jobs):
            job = jobs.get(job_id)
            if job is None or job.state.terminal:
                del self.jobs[job_id]
                continue
            rnd = self.jobs[job_id].round
            if rnd.suspected or rnd.first_step_at is None or rnd.last_progress is None:
                continue
            if running_launches(job) != rnd.launches:
                continue
            limit = self.hang_seconds(job)
            stalled = now - rnd.last_progress
            if stalled < limit:
                continue
            rnd.suspected = True
            ranks = tuple(RankAt(r.name, r.launch_id, rnd.steps.get(r.launch_id))
                          for r in job.replicas if r.launch_id is not None)
            out.append(Suspect(job_id, job.attempt, stalled, limit, ranks))
        return out


def verdict(suspect: Suspect, stacks: Mapping[str, StackSummary]) -> HangVerdict:
    """Name the laggard: the rank(s) outside a collective while others wait in one; else the
    lowest step; else (every rank alike) the first rank, saying that none stood out."""
    ranks = list(suspect.ranks)
    known = [r for r in ranks if r.replica in stacks and stacks[r.replica].attached]
    inside = [r for r in known if stacks[r.replica].in_collective]
    outside = [r for r in known if not stacks[r.replica].in_collective]
    steps = [r.step for r in ranks if r.step is not None]
    if inside and outside:
        laggard = min(outside, key=lambda r: (r.step if r.step is not None else -1))
        reason = "outside the collective the others wait in"
    elif steps and min(steps) != max(steps):
        laggard = min((r for r in ranks if r.step is not None), key=lambda r: r.step or 0)
        reason = f"lowest step ({laggard.step}; others up to {max(steps)})"
    else:
        laggard = ranks[0]
        reason = "no rank stood out (all at the same step, all in the same place)"
    where = tuple(_where(r, stacks.get(r.replica)) for r in ranks)
    at = stacks.get(laggard.replica)
    place = f" in {at.where}" if at is not None and at.attached and at.where else ""
    message = (f"Replica {laggard.replica} hung: no rank advanced for "
               f"{suspect.stalled_for:.0f}s (hang_seconds {suspect.hang_seconds:g}); "
               f"{laggard.replica} was {reason}{place}.")
    return HangVerdict(laggard, reason, message, where)


def _where(r: RankAt, s: StackSummary | None) -> str:
    step = f"step {r.step}" if r.step is not None else "no step yet"
    if s is None:
        return f"{r.replica} {step}: no stacks"
    if not s.attached:
        return f"{r.replica} {step}: no stacks ({s.where})"
    kind = "in a collective" if s.in_collective else "outside any collective"
    return f"{r.replica} {step}: {kind}, at {s.where}"


def hang_verdict(message: str) -> Verdict:
    """A hang restarts the group (by the failure policy's budgets), charged to the laggard."""
    return Verdict(Action.RESTART, ErrorCode.HANG, message, "hang")
