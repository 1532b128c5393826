"""Faults in the machine and in stored data hit one job, never the controller or the others.

Real sqlite and the real controller loop; the fake backend scripts the faults.
"""

from __future__ import annotations

import errno
import itertools
import json
import sys
import time
from pathlib import Path

from perdure.backends.base import LaunchError, NodeInfo
from perdure.backends.fake import FakeBackend, FakeRun
from perdure.controller.loop import Controller
from perdure.core.clusterspec import ClusterSpec, NodeSpec
from perdure.core.events import Launch, Observation, ReplicaExited, ReplicaStarted, Stop
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec
from perdure.store.sqlite import Store


class FaultyBackend(FakeBackend):
    """The fake backend, with launches and stops that fail as the OS would."""

    def __init__(self, launch_errors: list[Exception], stop_errors: int = 0,
                 poll_errors: int = 0) -> None:
        super().__init__([NodeInfo("local", 4)], lambda launch: FakeRun(seconds=0.05))
        self.launch_errors, self.stop_errors = launch_errors, stop_errors
        self.poll_errors = poll_errors

    def poll(self) -> list[Observation]:
        if self.poll_errors:
            self.poll_errors -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return super().poll()

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


def test_a_full_disk_at_launch_backs_off_and_spends_no_budget(tmp_path: Path) -> None:
    refusals = [OSError(errno.ENOSPC, "No space left on device"),
                LaunchError("cannot start the spawner"),  # raised from EMFILE: the machine's
                OSError(errno.ENOSPC, "No space left on device")]
    refusals[1].__cause__ = OSError(errno.EMFILE, "Too many open files")
    backend = FaultyBackend(refusals)
    tried: list[float] = []
    real_launch = backend.launch

    def launch(d: Launch) -> None:
        tried.append(time.monotonic())
        real_launch(d)

    backend.launch = launch  # type: ignore[method-assign]
    ctl, store = controller(tmp_path, backend)
    ctl.start()
    job = new_job("disk", replicas=1, restart={"max_job_retries": 0})
    queued = new_job("queued", replicas=4)  # waits for the first job's slot: never charged
    store.submit(job)
    store.submit(queued)
    done = drive(ctl, store, job.id, queued.id)
    for one in done.values():
        assert one.state.value == "SUCCEEDED" and one.attempt == 1 and one.retries == {}
        assert all(r.restarts == 0 for r in one.replicas)
    gaps = [b - a for a, b in itertools.pairwise(tried[:4])]  # the first job's four tries
    assert gaps[0] >= 0.45 and gaps[1] >= 0.95 and gaps[2] >= 1.9, gaps  # doubling
    said = [e.message for e in store.events(job.id) if "refused its launch" in e.message]
    assert len(said) == 1 and "No space left on device" in said[0], said


def test_a_cancel_while_the_machine_refuses_the_launch(tmp_path: Path) -> None:
    backend = FaultyBackend([OSError(errno.ENOSPC, "No space left on device")] * 50)
    ctl, store = controller(tmp_path, backend)
    ctl.start()
    job = new_job("held")
    store.submit(job)
    ctl.run(until=lambda: len(ctl.held) == 1)
    store.command("cancel", job.id)
    done = drive(ctl, store, job.id)[job.id]
    assert done.state.value == "CANCELLED" and done.retries == {} and not ctl.held


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


def test_a_stop_or_poll_the_os_refuses_is_tried_again(tmp_path: Path) -> None:
    backend = FaultyBackend([], stop_errors=2, poll_errors=3)
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
    polls = [e.message for e in store.events() if e.job_id is None]
    assert sum("could not poll the backend" in m for m in polls) == 1


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


def test_malformed_and_out_of_order_backend_replies_fail_one_launch(tmp_path: Path) -> None:
    backend = FakeBackend([NodeInfo("local", 4)], lambda launch: FakeRun(
        seconds=None if launch.job_id.startswith("bad") and launch.launch_id.split(".")[1]
        == "1" else 0.05, start_late=launch.job_id.startswith("late")))
    ctl, store = controller(tmp_path, backend)
    ctl.start()
    bad, good, late = new_job("bad"), new_job("good", replicas=2), new_job("late")
    for job in (bad, good, late):
        store.submit(job)
    ctl.run(until=lambda: store.job(bad.id).state.value == "RUNNING")  # type: ignore[union-attr]
    lid = store.job(bad.id).replicas[0].launch_id  # type: ignore[union-attr]
    assert lid is not None
    backend.fail_polls(KeyError("pid"), RuntimeError("the backend broke"))
    backend.inject(
        ReplicaExited(lid, "1", time.time()),  # type: ignore[arg-type]  # an exit code as text
        ReplicaStarted(lid, -1, float("nan")),  # more of the same launch: said once
        {"launch_id": lid, "pid": 7},  # not an observation at all
        "garbage",  # names no launch
        ReplicaStarted("nope-000009.1.w-0.x", 5, time.time()),  # a launch nobody knows
    )
    done = drive(ctl, store, bad.id, good.id, late.id)  # the controller survives all of it
    assert done[good.id].state.value == "SUCCEEDED" and done[good.id].retries == {}
    assert done[late.id].state.value == "SUCCEEDED" and done[late.id].retries == {}
    first = done[bad.id]
    assert first.state.value == "SUCCEEDED" and first.attempt == 2  # a new attempt ran
    assert first.retries == {"INTERNAL": 1}
    assert all(r.restarts == 0 for r in first.replicas)
    failed = [e.message for e in store.events(bad.id) if e.kind == "launch-failed"]
    assert len(failed) == 1, failed  # said once, with the record
    assert "unexpected reply" in failed[0] and "exit_code='1'" in failed[0]
    assert any(s.launch_id == lid and s.signal == 9 for s in backend.stops)  # and stopped
    internal = [e.message for e in store.events() if e.job_id is None]
    assert sum("could not poll the backend" in m for m in internal) == 1
    assert any("KeyError" in m for m in internal)
    assert any("'garbage'" in m for m in internal)


def test_the_core_failing_on_a_reply_fails_that_launch_only(tmp_path: Path,
                                                            monkeypatch: object) -> None:
    # Belt and braces: a well-formed reply the core cannot digest (a core bug) fails the
    # launch it names; the tick goes on.
    import perdure.controller.loop as loop

    real = loop.decide
    poison: set[str] = set()

    def decide(snap, observations, *rest):  # type: ignore[no-untyped-def]
        if any(getattr(o, "launch_id", None) in poison and isinstance(o, ReplicaStarted)
               for o in observations):
            raise ZeroDivisionError("a core bug")
        return real(snap, observations, *rest)

    backend = FakeBackend([NodeInfo("local", 4)], lambda launch: FakeRun(seconds=0.05))
    ctl, store = controller(tmp_path, backend)
    ctl.start()
    sick, well = new_job("sick"), new_job("well")
    store.submit(sick)
    store.submit(well)
    ctl.tick()  # both launched
    poison.add(store.job(sick.id).replicas[0].launch_id or "")  # type: ignore[union-attr]
    monkeypatch.setattr(loop, "decide", decide)  # type: ignore[attr-defined]
    done = drive(ctl, store, sick.id, well.id)
    assert done[well.id].state.value == "SUCCEEDED" and done[well.id].retries == {}
    assert done[sick.id].state.value == "SUCCEEDED" and done[sick.id].retries == {"INTERNAL": 1}
    failed = [e.message for e in store.events(sick.id) if e.kind == "launch-failed"]
    assert len(failed) == 1 and "ZeroDivisionError" in failed[0]


def test_a_backend_that_cannot_re_attach_fails_those_launches_not_the_start(
        tmp_path: Path) -> None:
    def script(launch: Launch) -> FakeRun:  # the first attempt runs until stopped
        return FakeRun(seconds=None if launch.launch_id.split(".")[1] == "1" else 0.05)

    first, store = controller(tmp_path, FakeBackend([NodeInfo("local", 4)], script))
    first.start()
    job = new_job("adopted")
    store.submit(job)
    first.run(until=lambda: store.job(job.id).state.value == "RUNNING")  # type: ignore[union-attr]
    first.close()  # a controller that ends, leaving its replica running

    class Broken(FakeBackend):
        def adopt(self, launch_ids: list[str]) -> list[Observation]:
            raise RuntimeError("the cluster is not answering")

    second = Controller(tmp_path, store, Broken([NodeInfo("local", 4)], script),
                        ClusterSpec(nodes=[NodeSpec(name="local", slots=4)]),
                        LaunchSettings(str(tmp_path), sys.executable), interval=0.005)
    second.start()  # raised out of start before
    done = drive(second, store, job.id)[job.id]
    assert done.state.value == "SUCCEEDED" and done.attempt == 2
    assert done.retries == {"INTERNAL": 1}
    failed = [e.message for e in store.events(job.id) if e.kind == "launch-failed"]
    assert len(failed) == 1 and "could not re-attach" in failed[0]
