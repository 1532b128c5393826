"""Goodput reporting: what a replica did with its time, for `perdure describe`.

A replica appends JSON lines to `$PERDURE_REPORT_DIR/progress.jsonl` (nothing is written when
the variable is unset, e.g. outside perdure): completed steps with their duration, the
blocking part of checkpoint saves, restores, time waiting for data. Step lines are buffered
and appended at most every FLUSH_EVERY seconds (and at exit), so reporting costs microseconds
per step; checkpoint and restore records are appended at once. A replica SIGKILLed loses at
most FLUSH_EVERY seconds of step records, which the account then counts as recovery instead of
wasted progress.

    from perdure.runtime import goodput
    for step in range(start, steps):
        with goodput.step(step):
            train_step()
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FLUSH_EVERY = 0.25


class Reporter:
    """Buffers progress records and appends them to one file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._steps: list[float] = []  # pending step durations, folded into one record
        self._first_step: int | None = None
        self._last_step: int | None = None
        self._steps_t0 = 0.0
        if path is not None:
            self.emit("start", pid=os.getpid())
            atexit.register(self.flush)

    def emit(self, kind: str, **fields: Any) -> None:
        """Append a record now (with the steps before it): these are rare and matter most."""
        if self.path is None:
            return
        with self._lock:
            self._fold_steps()
            self._lines.append(json.dumps({"kind": kind, "t": time.time(), **fields}))
        self.flush()

    def step(self, step: int, seconds: float) -> None:
        """A training step finished after `seconds` of work."""
        if self.path is None:
            return
        with self._lock:
            if self._first_step is None:
                self._first_step, self._steps_t0 = step, time.time() - seconds
            self._last_step = step
            self._steps.append(seconds)
        self._maybe_flush()

    def _fold_steps(self) -> None:
        if self._first_step is None:
            return
        self._lines.append(json.dumps({
            "kind": "steps", "t": time.time(), "t0": self._steps_t0,
            "first": self._first_step, "last": self._last_step,
            "seconds": sum(self._steps), "count": len(self._steps),
        }))
        self._first_step = self._last_step = None
        self._steps = []

    def _maybe_flush(self) -> None:
        if time.monotonic() - self._last_flush >= FLUSH_EVERY:
            self.flush()

    def flush(self, block: bool = True) -> None:
        """Append what is pending. `block=False` (from a signal handler, which may interrupt
        this very thread inside the lock) gives up rather than wait for the lock."""
        if self.path is None:
            return
        if not self._lock.acquire(blocking=block):
            return
        try:
            self._fold_steps()
            lines, self._lines = self._lines, []
            self._last_flush = time.monotonic()
        finally:
            self._lock.release()
        if lines:  # one append: a reader never sees half a line from a live process
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, ("\n".join(lines) + "\n").encode())
            finally:
                os.close(fd)


_reporter: Reporter | None = None


def reporter() -> Reporter:
    """This process's reporter (writes only under perdure, where PERDURE_REPORT_DIR is set)."""
    global _reporter
    if _reporter is None:
        d = os.environ.get("PERDURE_REPORT_DIR")
        path = None
        if d and Path(d).is_dir():
            path = Path(d) / "progress.jsonl"
        _reporter = Reporter(path)
    return _reporter


@contextmanager
def step(n: int) -> Iterator[None]:
    """Time one training step (its whole body) and report it as productive work."""
    began = time.perf_counter()
    yield
    reporter().step(n, time.perf_counter() - began)


def checkpoint_saved(step: int, blocked_seconds: float) -> None:
    reporter().emit("checkpoint_save", step=step, seconds=blocked_seconds)


def checkpoint_restored(step: int | None, seconds: float) -> None:
    """Training resumes after `step` (None: from scratch) after `seconds` of loading."""
    reporter().emit("restore", step=step, seconds=seconds)


def data_waited(seconds: float) -> None:
    reporter().emit("data_wait", seconds=seconds)


def flush() -> None:
    reporter().flush()
