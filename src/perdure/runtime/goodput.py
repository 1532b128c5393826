"""Goodput reporting: what a replica did with its time, for `perdure describe`.

A replica appends JSON lines (steps, the blocking part of saves, restores) to its progress
record through its transport; step records at most every FLUSH_EVERY seconds, the rest at once.

    from perdure.runtime import goodput
    goodput.total(steps)                # optional: an ETA and `step 160 / 6000`
    for step in range(start, steps):
        with goodput.step(step):
            train_step()
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perdure.runtime.ranks import PROCS_ENV
from perdure.runtime.transport import FileTransport, Transport
from perdure.runtime.transport import current as current_transport

FLUSH_EVERY = 0.25
# The `source` of a `restore` record (core.interval reads it)
FROM_CHECKPOINT = "checkpoint"
FROM_NODE_SNAPSHOT = "snapshot-local"  # a node-local file ($PERDURE_NODE_DIR, /dev/shm)
FROM_PEER_SNAPSHOT = "snapshot-peer"  # a peer replica's memory
FROM_OWN_SNAPSHOT = "snapshot-memory"  # the process's own memory
FROM_SCRATCH = "scratch"
DRAIN_SECONDS = 5.0  # at exit: how long records still on their way to the relay may take
NOTE_SECONDS = 2.0  # how long a note waits to be delivered (a replica may end right after it)


class Reporter:
    """Buffers progress records and appends them through `sink`: a transport, the path of a
    progress.jsonl file, or None to report nothing."""

    def __init__(self, sink: Transport | Path | None) -> None:
        if isinstance(sink, Path):
            sink = FileTransport(report_dir=sink.parent)
        self.sink = sink if sink is not None and sink.reports else None
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._seconds, self._count = 0.0, 0  # pending steps' durations, folded into one record
        self._first_step: int | None = None
        self._last_step: int | None = None
        self._steps_t0 = 0.0
        if self.sink is not None:
            self.emit("start", pid=os.getpid())
            atexit.register(self.drain)

    def emit(self, kind: str, **fields: Any) -> None:
        """Append a record now (with the steps before it): these are rare and matter most."""
        if self.sink is None:
            return
        with self._lock:
            self._fold_steps()
            self._lines.append(json.dumps({"kind": kind, "t": time.time(), **fields}))
        self.flush()

    def step(self, step: int, seconds: float) -> None:
        """A training step finished after `seconds` of work."""
        if self.sink is None:
            return
        with self._lock:
            if self._first_step is None:
                self._first_step, self._steps_t0 = step, time.time() - seconds
                self._seconds, self._count = 0.0, 0
            self._last_step = step
            self._seconds += seconds
            self._count += 1
        if time.monotonic() - self._last_flush >= FLUSH_EVERY:
            self.flush()

    def _fold_steps(self) -> None:
        if self._first_step is None:
            return
        self._lines.append(json.dumps({
            "kind": "steps", "t": time.time(), "t0": self._steps_t0,
            "first": self._first_step, "last": self._last_step,
            "seconds": self._seconds, "count": self._count,
        }))
        self._first_step = self._last_step = None

    def flush(self, block: bool = True) -> None:
        """Append what is pending. `block=False` (from a signal handler, which may interrupt
        this very thread inside the lock) gives up rather than wait for the lock."""
        if self.sink is None:
            return
        if not self._lock.acquire(blocking=block):
            return
        try:
            self._fold_steps()
            lines, self._lines = self._lines, []
            self._last_flush = time.monotonic()
        finally:
            self._lock.release()
        if lines:
            self.sink.append_progress(lines)

    def drain(self, timeout: float = DRAIN_SECONDS) -> bool:
        """Flush, then wait up to `timeout` s until the records are delivered (at exit)."""
        self.flush()
        return self.sink is None or self.sink.flush_progress(timeout)


_reporter: Reporter | None = None


def reporter() -> Reporter:
    """This process's reporter (writes only under perdure, through the process's transport)."""
    global _reporter
    if _reporter is None:
        # One timeline per replica: its local rank 0 reports for all its processes.
        speaks = os.environ.get("LOCAL_RANK", "0") == "0" or os.environ.get(PROCS_ENV) is None
        _reporter = Reporter(current_transport() if speaks else None)
    return _reporter


@contextlib.contextmanager
def step(n: int) -> Iterator[None]:
    """Time one training step (its whole body) and report it as productive work."""
    began = time.perf_counter()
    yield  # a step that raises did no productive work: nothing is reported
    reporter().step(n, time.perf_counter() - began)


def total(steps: int) -> None:
    """Say how many steps the run has: `describe` shows `step 160 / 6000` and `run` an ETA."""
    reporter().emit("total", steps=int(steps))


def checkpoint_saved(step: int, blocked_seconds: float) -> None:
    reporter().emit("checkpoint_save", step=step, seconds=blocked_seconds)


def snapshot_saved(step: int, blocked_seconds: float) -> None:
    """An in-memory snapshot blocked training for `blocked_seconds`: badput like a save's, but
    not the persistent save's cost that `checkpoint.every: auto` measures."""
    reporter().emit("checkpoint_save", step=step, seconds=blocked_seconds, what="snapshot")


def checkpoint_failed(step: int, consecutive: int, alert_after: int, error: str) -> None:
    """A save of `step` failed for good; `consecutive` failed in a row (loud at `alert_after`)."""
    reporter().emit("checkpoint_failed", step=step, consecutive=consecutive,
                    alert_after=alert_after, error=error)


def checkpoint_recovered(step: int, failed: int) -> None:
    """The save of `step` committed after `failed` saves in a row had failed."""
    reporter().emit("checkpoint_committed", step=step, after_failures=failed)


def checkpoint_restored(step: int | None, seconds: float, source: str | None = None) -> None:
    """Training resumes after `step` (None: from scratch) after `seconds` of loading, read from
    `source` (None: the persistent checkpoint, or scratch without a step): one of the FROM_
    words above, which tell the controller which failures the checkpoint had to recover."""
    if source is None:
        source = FROM_CHECKPOINT if step is not None else FROM_SCRATCH
    reporter().emit("restore", step=step, seconds=seconds, source=source)


def snapshot_restored(step: int, seconds: float, where: str) -> None:
    """Training resumes after `step`, restored from a snapshot held `where` (Snapshotter's
    "memory", "file" or "peer:<replica>")."""
    source = (FROM_PEER_SNAPSHOT if where.startswith("peer") else
              FROM_NODE_SNAPSHOT if where == "file" else FROM_OWN_SNAPSHOT)
    checkpoint_restored(step, seconds, source)


def note(message: str) -> None:
    """Something the job's owner should see in its events (`perdure describe`), sent once
    and waited for (up to NOTE_SECONDS: notes are rare), so that a replica that ends right
    after it, even by `os._exit` or a kill, has delivered it."""
    r = reporter()
    r.emit("note", message=message)
    r.drain(NOTE_SECONDS)


def flush() -> None:
    reporter().flush()


def drain(timeout: float = DRAIN_SECONDS) -> bool:
    """Flush and wait (up to `timeout` s) until the records reached the controller."""
    return _reporter is None or _reporter.drain(timeout)
