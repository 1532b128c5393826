"""The persist worker: one thread, jobs in order, at the process's CPU priority."""

from __future__ import annotations

import os
import threading

from perdure.runtime.checkpoint.worker import PersistWorker


def test_jobs_run_in_order_on_one_thread_at_the_process_cpu_priority() -> None:
    worker = PersistWorker("test-persist")
    seen: list[tuple[int, int, int]] = []

    def job(i: int) -> None:
        me = threading.get_native_id()
        seen.append((i, me, os.getpriority(os.PRIO_PROCESS, me)))

    events = [worker.submit(lambda i=i: job(i)) for i in range(5)]
    for e in events:
        assert e.wait(30)
    assert [i for i, _, _ in seen] == list(range(5))
    assert len({tid for _, tid, _ in seen}) == 1
    # A thread that shares the GIL with training is never niced (a preempted GIL holder
    # would stall training): same CPU priority as the test's own thread.
    assert {nice for _, _, nice in seen} == {os.getpriority(os.PRIO_PROCESS, 0)}
    thread = worker.thread
    worker.close()
    assert thread is not None and not thread.is_alive()


def test_a_job_that_raises_does_not_stop_the_worker() -> None:
    worker = PersistWorker("test-persist")
    ran: list[int] = []

    def bad() -> None:
        raise RuntimeError("boom")

    assert worker.submit(bad).wait(30)
    assert worker.submit(lambda: ran.append(1)).wait(30)
    assert ran == [1]
    worker.close()
    assert worker.submit(lambda: ran.append(2)).wait(30)  # closed, then used again
    worker.close()
    assert ran == [1, 2]
