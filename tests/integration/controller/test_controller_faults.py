"""Faults in the machine and in stored data hit one job, never the controller or the others.

Real sqlite and the real controller loop; the fake backend scripts the faults.
"""

from __future__ import annotations

import errno
import json
import sys
import time
from pathlib import Path

from perdure.backends.base import LaunchError, NodeInfo
from perdure.backends.fake import FakeBackend, FakeRun
from perdure.controller.loop import Controller
from perdure.core.events import Launch, Stop
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job, make_replicas
from perdure.core.spec import ClusterSpec, JobSpec, NodeSpec
from perdure.store.sqlite import Store


class FaultyBackend(FakeBackend):
    """The fake backend, with launches and stops that fail as the OS would."""

    def __init__(self, launch_errors: list[Exception], stop_errors: int = 0) -> None:
        super().__init__([NodeInfo("local", 4)], lambda launch: FakeRun(seconds=0.05))
        self.launch_errors, self.stop_errors = launch_errors, stop_errors

    def launch(self, launch: Launch) -> None:
        if self.launch_errors:
            raise self.launch_errors.pop(0)
        super().launch(launch)

    def stop(self, stop: Stop) -> None:
        if self.stop_errors:
            self.stop_errors -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        super().stop(stop)


def new_job(name: str, replicas: int = 1, **fields: object) -> Job:
    spec = JobSpec.model_validate({"name": name, "pools": [
        {"name": "w", "replicas": replicas, "command": ["python", "t.py"]}], **fields})
    return Job(id=f"{name}-000001", spec=spec, spec_dir="/", created=time.time(),
               replicas=make_replicas(spec))


def controller(tmp: Path, backend: FakeBackend) -> tuple[Controller, Store]:
    store = Store(tmp / "perdure.db")
    cluster = ClusterSpec(nodes=[NodeSpec(name="local", slots=4)])
    ctl = Controller(tmp, store, backend, cluster, LaunchSettings(str(tmp), sys.executable),
                     interval=0.005)
    return ctl, store


def drive(ctl: Controller, store: Store, *ids: str) -> dict[str, Job]:
    deadline = time.monotonic() + 20
    ctl.run(until=lambda: all(store.job(i).state.terminal for i in ids)  # type: ignore[union-attr]
            or time.monotonic() > deadline)
    ctl.close()
    return {i: store.job(i) for i in ids}  # type: ignore[misc]


def test_a_full_disk_at_launch_is_internal_and_spends_no_user_budget(tmp_path: Path) -> None:
    backend = FaultyBackend([OSError(errno.ENOSPC, "No space left on device")])
    ctl, store = controller(tmp_path, backend)
    ctl.start()
    job = new_job("disk", replicas=2, restart={"max_job_retries": 0})
    store.submit(job)
    done = drive(ctl, store, job.id)[job.id]
    assert done.state.value == "SUCCEEDED"
    assert done.retries == {"INTERNAL": 1}
    assert all(r.restarts == 0 for r in done.replicas)
    assert any("No space left on device" in e.message for e in store.events(job.id))


def test_a_launch_the_spec_makes_impossible_fails_at_once(tmp_path: Path) -> None:
    why = "cannot launch replica w-0: its working directory /nope does not exist"
    ctl, store = controller(tmp_path, FaultyBackend([LaunchError(why, user_error=True)]))
    ctl.start()
    job = new_job("user")
    store.submit(job)
    done = drive(ctl, store, job.id)[job.id]
    assert done.state.value == "FAILED" and done.attempt == 1 and done.retries == {}
    assert done.error is not None and done.error.code.value == "USER_CODE"
    assert "/nope does not exist" in done.error.message


def test_a_stop_the_os_refuses_is_tried_again(tmp_path: Path) -> None:
    backend = FaultyBackend([], stop_errors=2)
    backend.script = lambda launch: FakeRun()  # runs until stopped
    ctl, store = controller(tmp_path, backend)
    ctl.start()
    job = new_job("stop", restart={"stop_grace_seconds": 0})
    store.submit(job)
    ctl.run(until=lambda: store.job(job.id).state.value == "RUNNING")  # type: ignore[union-attr]
    store.command("cancel", job.id)
    done = drive(ctl, store, job.id)[job.id]
    assert done.state.value == "CANCELLED"
    messages = [e.message for e in store.events(job.id)]
    assert sum("Too many open files" in m for m in messages) == 1  # said once, not per tick


def corrupt(store: Store, job_id: str) -> None:
    """What an older perdure stored for `stop_grace_seconds: .inf`: JSON null."""
    row = store.db.execute("SELECT spec FROM jobs WHERE id=?", (job_id,)).fetchone()
    spec = json.loads(row[0])
    spec["restart"]["stop_grace_seconds"] = None
    store.db.execute("UPDATE jobs SET spec=? WHERE id=?", (json.dumps(spec), job_id))


def test_a_stored_job_that_cannot_be_read_fails_alone(tmp_path: Path) -> None:
    ctl, store = controller(tmp_path, FaultyBackend([]))
    early, good = new_job("early"), new_job("good")
    store.submit(early)
    corrupt(store, early.id)
    store.submit(good)
    ctl.start()  # the stored job is found at start
    late = new_job("late")
    store.submit(late)
    corrupt(store, late.id)  # and one that arrives through a submit command
    assert ctl.snapshot.jobs.keys() == {good.id}
    deadline = time.monotonic() + 20
    ctl.run(until=lambda: store.job(good.id).state.terminal  # type: ignore[union-attr]
            or time.monotonic() > deadline)
    for _ in range(3):
        ctl.tick()
    ctl.close()
    assert store.job(good.id).state.value == "SUCCEEDED"  # type: ignore[union-attr]
    states = {r["id"]: r["state"] for r in store.job_rows()}
    assert states[early.id] == states[late.id] == "FAILED"
    for bad in (early.id, late.id):
        assert "cannot be read back" in store.events(bad)[-1].message
