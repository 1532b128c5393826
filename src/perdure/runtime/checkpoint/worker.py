"""One long-lived background thread per Checkpointer, which persists its saves one after another.

A thread started per save cost about 2 ms of the ~4 ms a small save held training: creating
the thread and waiting until a busy machine's scheduler first runs it. Handing a save to a
thread that already waits costs a queue put. The thread is a daemon, so that it never keeps a
finished program alive by itself; instead, at interpreter exit every worker first finishes
the saves handed to it (as the per-save threads, which were not daemons, did), and a worker
whose thread is gone (after a fork) starts a new one at the next save.

Side effects: starts a thread; lowers that thread's I/O priority.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections.abc import Callable

from perdure.runtime.checkpoint.priority import lower_this_thread

log = logging.getLogger("perdure.checkpoint")
_WORKERS: weakref.WeakSet[PersistWorker] = weakref.WeakSet()


class PersistWorker:
    """Runs the callables handed to ``submit`` in order, in one thread of its own."""

    def __init__(self, name: str = "perdure-checkpoint-persist") -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], threading.Event] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        _WORKERS.add(self)

    @property
    def thread(self) -> threading.Thread | None:
        """The thread that runs the jobs (None until the first job)."""
        return self._thread

    def submit(self, job: Callable[[], None]) -> threading.Event:
        """Run ``job`` after the jobs before it; the returned event is set once it has run.
        ``job`` handles its own errors (one that escapes is logged, and the worker goes on)."""
        done = threading.Event()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                # Not started yet, or left behind by a fork (the child has only the thread
                # that forked): a queue shared with a dead thread would never be served.
                self._jobs = queue.SimpleQueue()
                self._thread = threading.Thread(target=_serve, args=(self._jobs,),
                                                name=self.name, daemon=True)
                self._thread.start()
                # A worker dropped without close() ends its thread (which holds no reference
                # to it) once its last job has run.
                weakref.finalize(self, self._jobs.put, None)
            self._jobs.put((job, done))
        return done

    def close(self) -> None:
        """Finish the jobs handed over, then end the thread (a later submit starts another)."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is not None and thread.is_alive():
                self._jobs.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def _serve(jobs: queue.SimpleQueue[tuple[Callable[[], None], threading.Event] | None]) -> None:
    # Only the I/O priority is lowered: a thread at a low CPU priority that holds the GIL
    # when the scheduler preempts it stalls the training thread until it runs again.
    lower_this_thread(cpu=False)
    while (item := jobs.get()) is not None:
        job, done = item
        del item  # hold no job (and so no Checkpointer) while idle
        try:
            job()
        except BaseException:  # the job reports its own errors; this one escaped
            log.exception("a checkpoint persist job failed")
        finally:
            del job
            done.set()


@atexit.register
def _finish_all() -> None:
    """At interpreter exit, finish every save handed to a worker (before torch's own exit
    handlers, registered earlier, run)."""
    for worker in list(_WORKERS):
        worker.close()
