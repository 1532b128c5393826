"""The watchdog's shell: feeds progress to core.watchdog, captures stacks of stalled jobs, and
hands the verdict (a `Hung` observation) to the next tick's decide.

Side effects: runs stack captures (py-spy, through the backend) in a background thread so a
tick never waits for them, and writes `<state>/logs/<job>/attempt-N/<replica>.stacks`
(appended: a second hang in the same attempt adds its own section).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from perdure.backends.stacks import DumpsStacks, StackDump
from perdure.core import stacks as st
from perdure.core.events import Hung, Observation, ReplicaProgress
from perdure.core.launchenv import job_of_launch
from perdure.core.model import Job
from perdure.core.watchdog import Suspect, Watchdog, verdict

STACK_TIMEOUT_SECONDS = 10.0


def stacks_path(state_dir: Path, job_id: str, attempt: int, replica: str) -> Path:
    """`logs/<job>/attempt-N/<replica>.stacks`, beside the replica's .out and .err."""
    return state_dir / "logs" / job_id / f"attempt-{attempt}" / f"{replica}.stacks"


class WatchShell:
    """Runs beside the tick: `step` before each decide returns the verdicts that are ready."""

    def __init__(self, state_dir: Path, backend: object,
                 clock: Callable[[], float] = time.time) -> None:
        self.state_dir, self.backend, self.clock = state_dir, backend, clock
        self.core = Watchdog()
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: list[Future[Hung]] = []

    def step(self, jobs: Mapping[str, Job], observations: list[Observation],
             now: float) -> list[Observation]:
        """Note this tick's progress; start captures for newly stalled jobs; return the
        verdicts of finished captures."""
        for obs in observations:
            if isinstance(obs, ReplicaProgress):
                job = jobs.get(job_of_launch(obs.launch_id))
                if job is not None:
                    self.core.progress(job, obs)
        done = [f for f in self._inflight if f.done()]
        self._inflight = [f for f in self._inflight if not f.done()]
        for suspect in self.core.check(jobs, now):
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="perdure-stacks")
            self._inflight.append(self._pool.submit(self.capture, suspect))
        return [f.result() for f in done]

    def capture(self, suspect: Suspect) -> Hung:
        """Every rank's stacks into its stacks file; the verdict naming the laggard."""
        summaries: dict[str, st.StackSummary] = {}
        written = []
        for rank in suspect.ranks:
            dump = self._dump(rank.launch_id)
            summaries[rank.replica] = (st.unavailable(dump.error) if dump.error is not None
                                       else st.summarize(dump.threads))
            path = stacks_path(self.state_dir, suspect.job_id, suspect.attempt, rank.replica)
            self._write(path, suspect, rank.replica, rank.step, dump)
            written.append(path)
        v = verdict(suspect, summaries)
        where = "; ".join(v.where)
        folder = written[0].parent if written else self.state_dir / "logs"
        report = (f"HANG: {v.laggard.replica} blamed ({v.reason}); no rank advanced for "
                  f"{suspect.stalled_for:.0f}s (hang_seconds {suspect.hang_seconds:g}). "
                  f"Where each rank was: {where}. Stacks: {folder}/<replica>.stacks")
        return Hung(v.laggard.launch_id, self.clock(), v.message, report)

    def _dump(self, launch_id: str) -> StackDump:
        if not isinstance(self.backend, DumpsStacks):
            return StackDump(error=f"the {type(self.backend).__name__} cannot capture stacks")
        try:
            return self.backend.dump_stacks(launch_id, STACK_TIMEOUT_SECONDS)
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
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
