"""The background workers: one thread each, jobs in order, at the priority asked for."""

from __future__ import annotations

import os
import threading

import pytest

from perdure.runtime.checkpoint.worker import NICE, PersistWorker


@pytest.mark.parametrize("lower", [False, True])
def test_jobs_run_in_order_on_one_thread_at_the_priority_asked_for(lower: bool) -> None:
    worker = PersistWorker("test-persist", lower=lower)
    seen: list[tuple[int, int, int]] = []

    def job(i: int) -> None:
        me = threading.get_native_id()
        seen.append((i, me, os.getpriority(os.PRIO_PROCESS, me)))

    events = [worker.submit(lambda i=i: job(i)) for i in range(5)]
    for e in events:
        assert e.wait(30)
    assert [i for i, _, _ in seen] == list(range(5))
    assert len({tid for _, tid, _ in seen}) == 1
    # The stager runs at the training's priority; the persist worker at the lowest it may.
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert {nice for _, _, nice in seen} == ({NICE} if lower else {mine})
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
