"""`checkpoint.every: auto` in the controller: measure, choose (core.interval), publish.

The intervals go to `<state>/intervals/<job>.json` (the replicas' `maybe_save` follows it)
after the tick that chose them commits. The record lives in memory: after a restart a job's
failures are read back from its job record, its running time and restore sources start over.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from perdure import statedir
from perdure.core import interval as iv
from perdure.core.events import Observation, ReplicaProgress
from perdure.core.launchenv import job_of_launch
from perdure.core.model import Job
from perdure.core.records import Event
from perdure.core.states import JobState

ACCOUNT_SECONDS = 1.0
ENV_PRIOR = "PERDURE_MTBF_PRIOR_SECONDS"


def prior_mtbf() -> float:
    """The MTBF assumed before any failure is seen ($PERDURE_MTBF_PRIOR_SECONDS)."""
    value = os.environ.get(ENV_PRIOR)
    if not value:
        return iv.PRIOR_MTBF_SECONDS
    try:
        prior = float(value)
    except ValueError:
        prior = -1.0
    if not prior > 0:
        raise ValueError(f"{ENV_PRIOR}={value!r}: use a number of seconds > 0, or unset it for "
                         f"the default ({iv.PRIOR_MTBF_SECONDS:.0f})")
    return prior


def publish_interval(state_dir: str, job_id: str, chosen: iv.Interval, now: float) -> None:
    path = statedir.interval_path(state_dir, job_id)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    statedir.write_atomically(path, json.dumps({**chosen.to_json(), "time": now}))


class _Seen:
    """A job's failures as its record shows them: retries plus restarts of every attempt."""

    def __init__(self) -> None:
        self.attempt = 0
        self.carried = 0  # restarts of attempts before the current one
        self.restarts = 0

    def failures(self, job: Job) -> int:
        if job.attempt != self.attempt:
            self.carried += self.restarts
            self.attempt, self.restarts = job.attempt, 0
        # counted as the ticks change replicas (core.counts), not summed over every replica
        self.restarts = max(self.restarts, job.count_restarts())
        return self.carried + self.restarts + sum(job.retries.values())


class IntervalShell:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.records: dict[str, iv.JobRecord] = {}
        self.seen: dict[str, _Seen] = {}
        self.prior = prior_mtbf()
        self.cluster = iv.Cluster(prior=self.prior)
        self._gone = iv.Cluster()  # what jobs that left this controller's view had seen
        self._last: float | None = None
        self.due: list[tuple[str, iv.Interval, float]] = []  # chosen; published after commit

    def step(self, jobs: Mapping[str, Job], observations: list[Observation],
             now: float) -> list[Event]:
        for obs in observations:
            if isinstance(obs, ReplicaProgress):
                self._note(jobs, obs)
        if self._last is not None and now - self._last < ACCOUNT_SECONDS:
            return []
        dt, self._last = (now - self._last if self._last is not None else 0.0), now
        self._account(jobs, dt)
        return self._choose(jobs, now)

    def publish(self) -> None:
        """Write the intervals chosen since the last call (their tick has committed)."""
        due, self.due = self.due, []
        for job_id, chosen, now in due:
            publish_interval(self.state_dir, job_id, chosen, now)

    def _note(self, jobs: Mapping[str, Job], obs: ReplicaProgress) -> None:
        """A save's cost; where each restore came from."""
        job = jobs.get(job_of_launch(obs.launch_id))
        if job is None or (obs.save_seconds is None and not obs.restores):
            return
        rec = self.records.setdefault(job.id, iv.JobRecord())
        rec.replicas = len(job.replicas)
        if obs.save_seconds is not None:
            iv.note_cost(rec, obs.save_seconds)
        for source in obs.restores:
            iv.note_restore(rec, source)

    def _account(self, jobs: Mapping[str, Job], dt: float) -> None:
        for job_id in [i for i in self.records if i not in jobs]:
            rec = self.records.pop(job_id)
            self.seen.pop(job_id, None)
            self._gone.failures += rec.failures
            self._gone.seconds += rec.seconds
        for job in jobs.values():
            if job.state is not JobState.RUNNING and job.id not in self.records:
                continue
            rec = self.records.setdefault(job.id, iv.JobRecord())
            rec.failures = self.seen.setdefault(job.id, _Seen()).failures(job)
            if job.state is JobState.RUNNING:
                rec.seconds += dt
        self.cluster = iv.Cluster(
            self._gone.failures + sum(r.failures for r in self.records.values()),
            self._gone.seconds + sum(r.seconds for r in self.records.values()), self.prior)

    def _choose(self, jobs: Mapping[str, Job], now: float) -> list[Event]:
        events = []
        for job in jobs.values():
            ck = job.spec.checkpoint
            if ck.every != "auto" or job.state not in (JobState.PENDING, JobState.RUNNING):
                continue
            rec = self.records.setdefault(job.id, iv.JobRecord())
            chosen = iv.choose(rec, self.cluster, ck.max_interval_seconds)
            if not iv.changed(rec.published, chosen):
                continue
            was = f" (was {rec.published.seconds:.1f}s)" if rec.published else ""
            rec.published = chosen
            self.due.append((job.id, chosen, now))
            events.append(Event(now, job.id, "checkpoint",
                                f"checkpoint interval {chosen.explain()}{was}"))
        return events
