"""The watchdog's shell: feeds progress to core.watchdog and core.straggler, captures the
stacks of stalled jobs on a thread (a tick never waits for them) into each replica's
`.stacks` file, and hands the verdict (`Hung`) to the next tick's decide.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from perdure import statedir
from perdure.backends.base import Backend
from perdure.backends.stacks import StackDump
from perdure.core import stacks as st
from perdure.core.events import Hung, Observation, ReplicaProgress
from perdure.core.launchenv import job_of_launch
from perdure.core.model import Job
from perdure.core.records import Event, Node
from perdure.core.straggler import Stragglers, drain
from perdure.core.watchdog import Suspect, Watchdog, running_launches, steady, verdict

STACK_TIMEOUT_SECONDS = 10.0
ENV_SAMPLE = "PERDURE_STRAGGLER_SAMPLE_SECONDS"
SWEEP_SECONDS = 1.0


def sample_seconds() -> float:
    """Seconds between straggler samples of a job's stacks (${ENV_SAMPLE}, default 30; 0: off)."""
    value = os.environ.get(ENV_SAMPLE, "")
    try:
        seconds = float(value) if value else 30.0
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise ValueError(f"{ENV_SAMPLE}={value!r}: use a number of seconds >= 0 (0: off)")
    return seconds


class WatchShell:
    def __init__(self, state_dir: Path, backend: Backend,
                 clock: Callable[[], float] = time.time) -> None:
        self.state_dir, self.backend, self.clock = state_dir, backend, clock
        self.core = Watchdog()
        self.stragglers = Stragglers()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="perdure-stacks")  # lazy threads
        self._inflight: list[Future[Hung]] = []
        self.sample_every = sample_seconds()
        self._samples: dict[str, Future[dict[str, bool]]] = {}
        self._next_sample: dict[str, float] = {}
        self._last_sweep = 0.0

    def step(self, jobs: Mapping[str, Job], nodes: Mapping[str, Node],
             observations: list[Observation], now: float
             ) -> tuple[list[Observation], list[Event]]:
        """Note this tick's progress and start captures; the verdicts ready (and drains of
        stragglers' nodes), and straggler events."""
        for obs in observations:
            if isinstance(obs, ReplicaProgress):
                job = jobs.get(job_of_launch(obs.launch_id))
                if job is not None and obs.step is not None:  # notes only: no progress
                    self.core.progress(job, obs)
                    self.stragglers.progress(job, obs)
        self._sample(jobs, now)
        drains, events = self._stragglers(jobs, nodes, now)
        done = [f for f in self._inflight if f.done()]
        self._inflight = [f for f in self._inflight if not f.done()]
        for suspect in self.core.check(jobs, now):
            self._inflight.append(self._pool.submit(self.capture, suspect))
        return [*(f.result() for f in done), *drains], events

    def _stragglers(self, jobs: Mapping[str, Job], nodes: Mapping[str, Node],
                    now: float) -> tuple[list[Observation], list[Event]]:
        drains: list[Observation] = []
        events = []
        for s in self.stragglers.check(jobs):
            command, said = drain(jobs[s.job_id], s, nodes, now)
            drains.extend([command] if command else [])
            events.append(Event(now, s.job_id, "straggler", s.message() + said))
        return drains, events

    def _sample(self, jobs: Mapping[str, Job], now: float) -> None:
        """Hand finished stack samples to the straggler rule; start the due ones."""
        for job_id, f in list(self._samples.items()):
            if f.done():
                del self._samples[job_id]
                if job_id in jobs:
                    self.stragglers.sampled(jobs[job_id], f.result())
        if not self.sample_every or now - self._last_sweep < min(SWEEP_SECONDS,
                                                                  self.sample_every):
            return
        self._last_sweep = now
        for gone in [i for i in self._next_sample if i not in jobs]:
            del self._next_sample[gone]
        for job in jobs.values():
            if (len(job.replicas) < 2 or job.id in self._samples or not steady(job)
                    or job.spec.watchdog.stragglers == "off"):
                continue
            # the first sample one period after the job is first seen running
            if now < self._next_sample.setdefault(job.id, now + self.sample_every):
                continue
            launches = running_launches(job)
            if launches is None:
                continue
            self._next_sample[job.id] = now + self.sample_every
            self._samples[job.id] = self._pool.submit(self.sample, sorted(launches))

    def sample(self, launches: list[str]) -> dict[str, bool]:
        """Launch id -> whether that rank waits in a collective now ({} if one is unreadable)."""
        out = {}
        for lid in launches:
            dump = self._dump(lid, nonblocking=True)
            if dump.error is not None:
                return {}
            summary = st.summarize(dump.threads)
            if not summary.attached:
                return {}
            out[lid] = summary.in_collective
        return out

    def capture(self, suspect: Suspect) -> Hung:
        """Every rank's stacks into its stacks file; the verdict naming the laggard."""
        summaries: dict[str, st.StackSummary] = {}
        written = []
        for rank in suspect.ranks:
            dump = self._dump(rank.launch_id)
            summaries[rank.replica] = (st.unavailable(dump.error) if dump.error is not None
                                       else st.summarize(dump.threads))
            path = (Path(statedir.log_dir(self.state_dir, suspect.job_id, suspect.attempt))
                    / f"{rank.replica}.stacks")
            self._write(path, suspect, rank.replica, rank.step, dump)
            written.append(path)
        v = verdict(suspect, summaries)
        where = "; ".join(v.where)
        folder = written[0].parent if written else self.state_dir / statedir.LOGS
        report = (f"HANG: {v.laggard.replica} blamed ({v.reason}); no rank advanced for "
                  f"{suspect.stalled_for:.0f}s (hang_seconds {suspect.hang_seconds:g}). "
                  f"Where each rank was: {where}. Stacks: {folder}/<replica>.stacks")
        return Hung(v.laggard.launch_id, self.clock(), v.message, report)

    def _dump(self, launch_id: str, nonblocking: bool = False) -> StackDump:
        try:
            return self.backend.dump_stacks(launch_id, STACK_TIMEOUT_SECONDS, nonblocking)
        except Exception as exc:  # a capture must never take the controller down
            return StackDump(error=f"capturing stacks failed: {exc}")

    def _write(self, path: Path, s: Suspect, replica: str, step: int | None,
               dump: StackDump) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.clock()))
        head = (f"=== {stamp} {s.job_id} attempt {s.attempt} {replica}: no rank advanced for "
                f"{s.stalled_for:.0f}s; last step {step}; captured with {dump.tool} ===\n")
        body = st.render(dump.threads) if dump.error is None else f"no stacks: {dump.error}\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(head + body)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
