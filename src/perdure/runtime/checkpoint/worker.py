"""Long-lived background threads of a Checkpointer, each running the jobs handed to it in turn.

A Checkpointer keeps two: one that makes the deferred staging copies (at the process's
priority: the optimizer's next step waits for them) and one that persists at the lowest CPU
priority (a thread cannot raise its priority again, hence two). The threads are daemons; at
interpreter exit each worker first finishes its jobs, in the order the workers were made.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable

log = logging.getLogger("perdure.checkpoint")
NICE = 19
_Jobs = queue.SimpleQueue[tuple[Callable[[], None], threading.Event] | None]
_WORKERS: list[weakref.ref[PersistWorker]] = []  # in the order made
_WORKERS_LOCK = threading.Lock()


class PersistWorker:
    """Runs the callables handed to ``submit`` in order, in one thread of its own (``lower``:
    at the lowest CPU priority; ``finish_at_exit``: the interpreter's exit waits for them)."""

    def __init__(self, name: str = "perdure-checkpoint-persist", *, lower: bool = True,
                 finish_at_exit: bool = True) -> None:
        self.name = name
        self.lower = lower
        self._jobs: _Jobs = queue.SimpleQueue()
        self.thread: threading.Thread | None = None  # the one that runs the jobs, once started
        self._lock = threading.Lock()
        if finish_at_exit:
            with _WORKERS_LOCK:
                _WORKERS[:] = [w for w in _WORKERS if w() is not None]
                _WORKERS.append(weakref.ref(self))

    def submit(self, job: Callable[[], None]) -> threading.Event:
        """Run ``job`` (which handles its own errors) after the jobs before it; the event is
        set once it has run."""
        done = threading.Event()
        with self._lock:
            if self.thread is None or not self.thread.is_alive():
                # Not started yet, or left behind by a fork (the child has only the thread
                # that forked): a queue shared with a dead thread would never be served.
                self._jobs = queue.SimpleQueue()
                self.thread = threading.Thread(target=_serve, args=(self._jobs, self.lower),
                                               name=self.name, daemon=True)
                self.thread.start()
                # A worker dropped without close() ends its thread (which holds no reference
                # to it) once its last job has run.
                weakref.finalize(self, self._jobs.put, None)
            self._jobs.put((job, done))
        return done

    def close(self) -> None:
        """Finish the jobs handed over, then end the thread (a later submit starts another)."""
        with self._lock:
            thread, self.thread = self.thread, None
            if thread is not None and thread.is_alive():
                self._jobs.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def lower_this_thread() -> None:
    """Give the calling thread the lowest CPU priority (Linux: a nice value per thread), where
    the kernel lets it."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (OSError, AttributeError):
        log.debug("could not lower the checkpoint writer's CPU priority", exc_info=True)


def _serve(jobs: _Jobs, lower: bool) -> None:
    if lower:
        lower_this_thread()
    while (item := jobs.get()) is not None:
        job, done = item
        del item  # hold no job (and so no Checkpointer) while idle
        try:
            job()
        except BaseException:  # the job reports its own errors; this one escaped
            log.exception("a checkpoint background job failed")
        finally:
            del job
            done.set()


@atexit.register
def _finish_all() -> None:
    """At exit (before torch's own handlers, registered earlier), finish every worker's jobs."""
    with _WORKERS_LOCK:
        workers = [w() for w in _WORKERS]
    for worker in workers:
        if worker is not None:
            worker.close()
