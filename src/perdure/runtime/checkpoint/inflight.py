"""A save after its staging copy: run at once or handed to the Checkpointer's background
threads, and what its end reports. One save is in flight at a time.

A storage failure of a tolerant save (``on_failure="report"``, or any save ``maybe_save``
makes) is counted and reported (`SaveFailures`) and training goes on; any other error is kept
and raised once, at the next ``finish``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from perdure.runtime.checkpoint.errors import CheckpointStorageError
from perdure.runtime.checkpoint.failures import SaveFailures
from perdure.runtime.checkpoint.persist import Persister, SaveJob, SaveStats
from perdure.runtime.checkpoint.staging import StepGate
from perdure.runtime.checkpoint.worker import PersistWorker


@dataclass
class InFlight:
    """The save in flight: its end, its figures, its error, the optimizers' gate."""

    finished: threading.Event | None  # set by the persist worker; None: ran inline
    stats: SaveStats
    error: BaseException | None = None
    gate: StepGate | None = None
    tolerant: bool = False  # a storage failure is reported (SaveFailures), never raised

    @property
    def done(self) -> bool:
        return self.finished is None or self.finished.is_set()


class SaveRunner:
    """Runs a Checkpointer's saves after staging (`reports`: its ``on_failure="report"``)."""

    def __init__(self, failures: SaveFailures, reports: bool) -> None:
        self.failures = failures
        self.reports = reports
        self.inflight: InFlight | None = None
        self.last: SaveStats | None = None  # the figures of the last save finished
        # Their threads start with the first background save; the stager is made first, so
        # that at exit its hand-over to the persist worker runs before that one is closed.
        self._stager = PersistWorker("perdure-checkpoint-stage", lower=False)
        self._worker = PersistWorker()

    @property
    def busy(self) -> bool:
        """Whether a background save is still persisting."""
        return self.inflight is not None and not self.inflight.done

    def run_now(self, persister: Persister, job: SaveJob, stats: SaveStats,
                tolerant: bool) -> None:
        """Persist `job` in this thread (a blocking save); its error is raised unless it is a
        storage failure of a tolerant save (a preemption notice's, made by maybe_save)."""
        self.inflight = InFlight(None, stats, tolerant=tolerant and self.reports)
        self._run(persister, job, self.inflight)
        self.finish()

    def hand_over(self, persister: Persister, job: SaveJob, stats: SaveStats,
                  optimizers: list[torch.optim.Optimizer]) -> None:
        """Persist `job` in the background, after the stager's copies that `optimizers` wait for."""
        inflight = InFlight(threading.Event(), stats, tolerant=self.reports)
        self.inflight = inflight
        try:
            if job.pending:  # the stager copies, opens the gate, then hands over to the worker
                job.gate = inflight.gate = StepGate(optimizers)
                self._stager.submit(lambda: self._stage_then_persist(persister, job, inflight))
            else:
                self._worker.submit(lambda: self._run(persister, job, inflight))
        except BaseException:  # no thread will open the gate: never leave a step held
            if inflight.gate is not None:
                inflight.gate.open()
                inflight.gate.remove()
            self.inflight = None
            raise

    def finish(self) -> None:
        """Wait for the save in flight; raise its error (once) if it failed."""
        inflight = self.inflight
        if inflight is None:
            return
        if inflight.finished is not None:
            inflight.finished.wait()
        if inflight.gate is not None:
            inflight.gate.remove()
            inflight.stats.extra["step_wait_s"] = inflight.gate.waited_s
            inflight.stats.blocked_s += inflight.gate.waited_s
        self.inflight = None
        self.last = inflight.stats
        if inflight.error is not None:
            raise inflight.error

    def close(self) -> None:
        """End the threads (after the jobs handed to them)."""
        self._stager.close()
        self._worker.close()

    def _stage_then_persist(self, persister: Persister, job: SaveJob, inflight: InFlight) -> None:
        try:
            persister.stage_pending(job, inflight.stats)
        finally:
            self._worker.submit(lambda: self._run(persister, job, inflight))

    def _run(self, persister: Persister, job: SaveJob, inflight: InFlight) -> None:
        try:
            persister.run(job, inflight.stats)
        except CheckpointStorageError as exc:
            if not inflight.tolerant:
                inflight.error = exc  # kept and raised at the next save() or wait()
                return
            self.failures.failed(job.step, exc, persister.comm.rank)
        except BaseException as exc:
            inflight.error = exc
        else:
            self.failures.succeeded(job.step, persister.comm.rank)
        finally:
            if inflight.finished is not None:
                inflight.finished.set()
