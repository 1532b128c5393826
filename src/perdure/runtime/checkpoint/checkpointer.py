"""The Checkpointer: async, sharded, atomic checkpoints that restore onto any world size.

    ckpt = Checkpointer("./checkpoints", keep=3)     # or an fsspec URL; async by default
    ckpt.save(step, {"model": model, "optim": optim, "step": step})  # returns once staged
    ckpt.wait()                                      # until committed; raises its error once
    step = ckpt.restore_latest(state)                # in place; None when there is none

Training waits only for the copy of this rank's share into reusable host buffers; writing,
the commit and retention run in the background. One save is in flight at a time. Every rank
calls ``save``/``restore_latest`` at the same point, as with any collective.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

import torch

from perdure.runtime import goodput
from perdure.runtime.checkpoint import commit, schedule
from perdure.runtime.checkpoint import state as st
from perdure.runtime.checkpoint.comm import Comm
from perdure.runtime.checkpoint.errors import CheckpointError
from perdure.runtime.checkpoint.failures import SaveFailures
from perdure.runtime.checkpoint.inflight import SaveRunner
from perdure.runtime.checkpoint.latest import restore_newest
from perdure.runtime.checkpoint.persist import Persister, SaveJob, SaveStats, staging_base
from perdure.runtime.checkpoint.plan import Plan, Prepared, make_plan, prepare
from perdure.runtime.checkpoint.policy import OnBusy, SavePolicy
from perdure.runtime.checkpoint.procwriter import WriterProcess
from perdure.runtime.checkpoint.staging import HostBuffers, optimizer_storages
from perdure.runtime.checkpoint.storage import Storage
from perdure.runtime.checkpoint.urls import make_storage

log = logging.getLogger("perdure.checkpoint")
_PERSIST_MODES = ("thread", "process")
_STAGE_MODES = ("deferred", "sync")


class Checkpointer:
    """Save and restore training state at ``url`` (a path, file:// or any fsspec URL).

    url: None reads $PERDURE_CHECKPOINT_DIR (set by perdure's controller).
    keep: committed checkpoints to keep (None keeps all).
    policy: when ``maybe_save`` saves, and whether a save that finds one in flight waits or
        skips; None follows the spec's ``checkpoint`` settings (every_steps, every_seconds,
        every: auto), as the controller passes them (see ``schedule``).
    async_save: False makes every save blocking.
    persist: "thread" (default) or "process": where the background writing runs; a process
        keeps serialisation off the training process's GIL and is started right away.
    staging_dir: a fast local directory to write shards to before uploading them to ``url``
        (default for non-local URLs: $PERDURE_STAGING_DIR or the system temp dir; a local
        ``url`` is written in place unless a staging_dir is given). Each rank stages in a
        directory of its own below it (named after the URL, the job, its attempt and the rank).
    stage: "deferred" (default): tensors only an optimizer in the state changes are copied in
        the background while the next step's forward and backward run, and that optimizer's
        next ``step()`` waits for the copy (a rank's copies under 1 MiB and 64 tensors are made
        in ``save`` instead: less than handing them over costs); "sync": everything is copied
        before ``save`` returns. A deferred tensor changed in place by anything but its
        optimizer before its copy fails that save with an error that says so (never a mixed
        checkpoint); changes made through ``.data`` escape that check, so code that writes
        parameters that way between save() and optimizer.step() should use "sync".
    timeout_s: how long a checkpoint collective waits for the other ranks.
    alone: this process saves and restores by itself, with no collective (for frameworks that
        write checkpoints on one rank only, as Lightning's DDP does; the state must then be
        the whole state).
    on_failure: "report" (default): a background save (or any save of ``maybe_save``) that
        fails on the storage (after its retries) does not stop training: it is logged and
        reported as an event, the previous checkpoint stays the newest complete one, and
        ``failures`` counts it; "raise": its error is raised at the next save() or wait().
        Failures of the state itself (a tensor changed while staged) always raise.
    alert_after: failed saves in a row after which the job says so loudly (None:
        $PERDURE_CHECKPOINT_ALERT_AFTER, default 3).
    storage_options: passed to fsspec for a non-local ``url`` (credentials, endpoint).
    report_times: False when the caller reports each save's blocking time and each restore's
        time to goodput itself, over a span that holds the Checkpointer's (PerdureTrainer's
        callback does): the Checkpointer then reports neither, so nothing counts twice.
    """

    def __init__(
        self,
        url: str | os.PathLike[str] | None = None,
        keep: int | None = 3,
        *,
        policy: SavePolicy | None = None,
        async_save: bool = True,
        persist: str = "thread",
        staging_dir: str | os.PathLike[str] | None = None,
        stage: str = "deferred",
        timeout_s: float = 1800.0,
        storage_options: Mapping[str, Any] | None = None,
        alone: bool = False,
        on_failure: str = "report",
        alert_after: int | None = None,
        report_times: bool = True,
    ) -> None:
        if keep is not None and (not isinstance(keep, int) or keep < 1):
            raise ValueError(f"keep is {keep!r}; it must be an int >= 1, or None to keep all.")
        if persist not in _PERSIST_MODES:
            raise ValueError(f"persist is {persist!r}; it must be one of {_PERSIST_MODES}.")
        if on_failure not in ("report", "raise"):
            raise ValueError(f"on_failure is {on_failure!r}; it must be 'report' or 'raise'.")
        if stage not in _STAGE_MODES:
            raise ValueError(f"stage is {stage!r}; it must be one of {_STAGE_MODES}.")
        self.stage = stage
        self.alone = alone
        self.report_times = report_times
        self.storage: Storage = make_storage(url, **dict(storage_options or {}))
        self._url_key = url_key(self.url)  # what the ranks compare: the same URL on all
        self.keep = keep
        self.policy, interval_file = (policy, None) if policy else schedule.policy_from_env()
        self._schedule = schedule.SaveSchedule(interval_file)
        self.async_save = async_save
        self.persist = persist
        self.staging_dir = staging_base(self.storage, staging_dir)
        self.timeout_s = timeout_s
        self.failures = SaveFailures(alert_after)
        self._runner = SaveRunner(self.failures, reports=on_failure == "report")
        self.skipped_partial: list[str] = []
        self.restore_failures: list[str] = []
        self._comm: Comm | None = None
        self._plan: Plan | None = None
        self._buffers: HostBuffers | None = None
        # Started now so that its imports are done by the first save.
        self._writer = WriterProcess() if persist == "process" else None
        self._seq = 0
        self._last_step: int | None = None
        self._last_time = time.monotonic()

    @property
    def on_failure(self) -> str:
        """"report" or "raise": what a background save's storage failure does."""
        return "report" if self._runner.reports else "raise"

    @on_failure.setter
    def on_failure(self, value: str) -> None:
        if value not in ("report", "raise"):
            raise ValueError(f"on_failure is {value!r}; it must be 'report' or 'raise'.")
        self._runner.reports = value == "report"

    @property
    def last_save(self) -> SaveStats | None:
        """The figures of the last save that finished (None before the first)."""
        return self._runner.last

    @property
    def url(self) -> str:
        """Where the checkpoints are."""
        return self.storage.url

    def _comm_(self) -> Comm:
        # A new process group (elastic resize, restart in place): new groups, a new plan.
        if self._comm is None or self._comm.stale:
            if self._comm is not None:
                self._plan = None
            self._comm = Comm(self.timeout_s, alone=self.alone)
        return self._comm

    def save(self, step: int, state: Mapping[str, Any], *, blocking: bool | None = None) -> bool:
        """Save ``state`` as ``step``; returns once it is staged (True), or False if skipped.

        state: dict of name -> nn.Module, Optimizer, tensor, object with state_dict() and
        load_state_dict(), or plain value. Raises the error of an earlier failed save, once.
        blocking: True returns only when committed (default: not ``async_save``).
        """
        return self._save(step, state, blocking, tolerant=False)

    def _save(
        self, step: int, state: Mapping[str, Any], blocking: bool | None, tolerant: bool
    ) -> bool:
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"step is {step!r}; it must be an int >= 0.")
        entered, cpu = time.perf_counter(), time.thread_time()
        comm = self._comm_()
        prepared, problem = prepare(state, comm.rank)
        changed = prepared is not None and (
            self._plan is None or prepared.signature != self._plan.signature
        )
        background = self.async_save if blocking is None else not blocking
        votes = comm.agree([int(problem is None), int(self._runner.busy), int(changed),
                            self._url_key])
        self._check_same_url(comm, votes)
        if problem is not None:
            raise problem
        failed = [rank for rank, v in enumerate(votes) if not v[0]]
        if failed:
            raise CheckpointError(
                f"save of step {step} abandoned: rank(s) {failed} could not prepare their "
                "state (their own error says why); no rank saved."
            )
        if any(v[1] for v in votes) and self.policy.on_busy is OnBusy.SKIP:
            log.info("skipped the save of step %d: the previous save is still persisting", step)
            return False
        assert prepared is not None
        waited = time.perf_counter()
        self._runner.finish()
        stats = SaveStats(step=step, extra={"waited_s": time.perf_counter() - waited})
        if any(v[2] for v in votes):
            self._replan(prepared, comm)
        job, optimizers = self._stage(stats, state, prepared, comm)
        # What training waited for in save(), besides a previous save still in flight.
        stats.blocked_s = time.perf_counter() - entered - stats.extra["waited_s"]
        stats.extra["save_cpu_s"] = time.thread_time() - cpu
        if background:
            self._runner.hand_over(self._persister(comm), job, stats, optimizers)
        else:
            self._runner.run_now(self._persister(comm), job, stats, tolerant)
        if self.report_times:  # the staging copy, or all of a blocking save
            goodput.checkpoint_saved(
                step, stats.blocked_s if background else time.perf_counter() - entered)
        return True

    def maybe_save(self, step: int, state: Mapping[str, Any]) -> bool:
        """Save if the policy says ``step`` is due (the ranks agree on timed saves).

        On a preemption notice to any rank, every rank saves the same step, waits for the
        commit and exits suspended: a script that calls this every step needs nothing else.
        A save made here that fails is reported (``failures``), not raised: training goes on.
        """
        now = time.monotonic()
        self.policy = self._schedule.refresh(self.policy, now)
        policy, last = self.policy, self._last_step
        due, notice = self._schedule.decide(
            policy.due_by_steps(step, last),
            policy.due_by_clock(step, now, last, self._last_time), self._comm_)
        if notice:
            if step != self._last_step:
                self._save(step, state, True, tolerant=True)
            self.wait()
            schedule.exit_suspended()
        if not due:
            return False
        return self._save(step, state, None, tolerant=True)  # it reports its blocking cost

    def _replan(self, prepared: Prepared, comm: Comm) -> None:
        if self._buffers is not None:
            self._buffers.close()
            self._buffers = None
        self._plan = make_plan(
            prepared.flat, prepared.paths, prepared.signature, commit.new_token(), comm
        )
        self._seq = 0  # with the plan's agreed token, names this plan's saves alike on all ranks
        pin = torch.cuda.is_available()  # device-to-host copies need page-locked memory
        self._buffers = HostBuffers(
            self._plan.items, shared=self.persist == "process", pin=pin
        )

    def _stage(self, stats: SaveStats, state: Mapping[str, Any], prepared: Prepared, comm: Comm
               ) -> tuple[SaveJob, list[torch.optim.Optimizer]]:
        assert self._plan is not None and self._buffers is not None
        start = time.perf_counter()
        optimizers, defer = (optimizer_storages(state) if self.stage == "deferred"
                             else ([], frozenset()))
        staged, pending = self._buffers.stage(prepared.flat, defer)
        stats.extra["stage_s"] = time.perf_counter() - start
        self._seq += 1
        step = stats.step
        dir_name = (
            commit.tmp_name(step, f"{self._plan.token}-{self._seq}")
            if self.storage.atomic_rename
            else commit.final_name(step)
        )
        self._last_step, self._last_time = step, time.monotonic()
        job = SaveJob(step, dir_name, staged, self._buffers, self._plan.metadata,
                      self._plan.paths, comm.world, pending)
        return job, optimizers

    def _persister(self, comm: Comm) -> Persister:
        if self.persist == "process" and self._writer is None:  # closed, then used again
            self._writer = WriterProcess()
        return Persister(self.storage, comm, self.keep, self.staging_dir, self._writer)

    def wait(self) -> None:
        """Block until the last save is committed; raise its error (once) if it failed."""
        self._runner.finish()

    def restore_latest(self, state: MutableMapping[str, Any]) -> int | None:
        """Load the newest committed checkpoint into ``state`` in place; return its step.

        Returns None when there is none. Partial checkpoints (crashed saves) are skipped, named
        in the log and in ``skipped_partial``, and never loaded. A committed checkpoint that
        fails to load for any reason (a checksum that differs, a read error, a state that does
        not fit) is named with the reason in the log and in ``restore_failures``, and the one
        before it is tried; the error is raised only when none loads.
        """
        return self._restore(state, None)

    def restore(self, state: MutableMapping[str, Any], step: int) -> int:
        """Load the committed checkpoint of ``step`` into ``state`` in place; return ``step``."""
        restored = self._restore(state, step)
        assert restored is not None
        return restored

    def _restore(self, state: MutableMapping[str, Any], step: int | None) -> int | None:
        began = time.perf_counter()
        self.wait()
        comm = self._comm_()
        st.check_state(state)
        self._check_same_url(comm, comm.agree([self._url_key]))
        outcome = restore_newest(state, self.storage, comm, step)
        self.skipped_partial = outcome.skipped
        self.restore_failures = outcome.failed
        if outcome.step is not None:
            self._last_step, self._last_time = outcome.step, time.monotonic()
        # Also a start from scratch (None): the account then counts nothing before it.
        if self.report_times:
            goodput.checkpoint_restored(outcome.step, time.perf_counter() - began)
        return outcome.step

    def _check_same_url(self, comm: Comm, votes: list[list[int]]) -> None:
        # The last value of each rank's votes is its url_key.
        if len({v[-1] for v in votes}) <= 1:
            return
        urls = comm.all_gather_object(self.url, control=True)
        by_url: dict[str, list[int]] = {}
        for rank, url in enumerate(urls):
            by_url.setdefault(url, []).append(rank)
        shown = "; ".join(f"rank(s) {ranks}: {url}" for url, ranks in by_url.items())
        raise CheckpointError(
            f"the ranks were given different checkpoint URLs ({shown}); every rank must pass "
            "the same url to Checkpointer (a directory or bucket they all reach), not a "
            "per-process path."
        )

    def steps(self) -> list[int]:
        """Steps of the committed checkpoints, oldest first."""
        return [c.step for c in commit.scan(self.storage).complete]

    def close(self) -> None:
        """Wait for the last save, then release the staging buffers, the writer process and the
        storage's threads."""
        try:
            self._schedule.close()
            self.wait()
        finally:
            if self._buffers is not None:
                self._buffers.close()
                self._buffers = None
            self._plan = None
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            self._runner.close()
            self.storage.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def url_key(url: str) -> int:
    """A 56-bit hash of a checkpoint URL, for the ranks to compare cheaply. No side effects."""
    return int.from_bytes(hashlib.blake2b(url.encode(), digest_size=7).digest(), "little")
