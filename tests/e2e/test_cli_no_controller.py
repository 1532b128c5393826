"""Commands with no controller running: applied at once where nothing has to stop, else
queued with a line saying that no controller runs and how to start one."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from test_cli_hostile import perdure, store_job

from perdure.controller.lock import lock_for_controller, try_lock
from perdure.core.states import JobState, ReplicaState
from perdure.store.sqlite import Store


def kinds(state: Path) -> list[str]:
    return [c.kind for _, c in Store(state / "perdure.db").commands_after(0)]


def state_of(state: Path, job_id: str) -> JobState:
    job = Store(state / "perdure.db").job(job_id)
    assert job is not None
    return job.state


def test_a_queued_job_is_cancelled_at_once(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    store_job(tmp_path, "idle-000001")
    code, out, err = perdure(capsys, tmp_path, "cancel", "idle-000001")
    assert code == 0, err
    assert "CANCELLED" in out and "no controller was running" in out
    assert state_of(tmp_path, "idle-000001") is JobState.CANCELLED
    assert kinds(tmp_path) == ["submit"]  # applied, not left for a controller
    events = [e.message for e in Store(tmp_path / "perdure.db").events("idle-000001")]
    assert any("CANCELLED" in m for m in events)


def test_hold_and_resume_apply_at_once(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store_job(tmp_path, "held-000001")
    assert perdure(capsys, tmp_path, "preempt", "held-000001", "--hold")[0] == 0
    assert state_of(tmp_path, "held-000001") is JobState.SUSPENDED
    code, out, _ = perdure(capsys, tmp_path, "resume", "held-000001")
    assert code == 0 and "QUEUED" in out
    assert state_of(tmp_path, "held-000001") is JobState.QUEUED


def test_a_running_job_waits_for_a_controller_and_says_so(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    job = store_job(tmp_path, "busy-000001", JobState.RUNNING)
    job.replicas[0].state, job.replicas[0].launch_id = ReplicaState.RUNNING, "busy-000001.1.w-0"
    Store(tmp_path / "perdure.db").commit_tick([job], [], None, None)
    code, out, err = perdure(capsys, tmp_path, "cancel", "busy-000001")
    assert code == 0, err
    assert "no controller is running" in out and f"perdure controller --state-dir {tmp_path}" in out
    assert kinds(tmp_path)[-1] == "cancel"  # the next controller applies it
    assert state_of(tmp_path, "busy-000001") is JobState.RUNNING
    code, out, _ = perdure(capsys, tmp_path, "node", "drain", "local")
    assert code == 0 and "no controller is running" in out


def test_with_a_controller_the_command_is_only_requested(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    store_job(tmp_path, "live-000001")
    fd = lock_for_controller(tmp_path)  # what a running controller holds
    assert fd is not None
    try:
        code, out, _ = perdure(capsys, tmp_path, "cancel", "live-000001")
    finally:
        os.close(fd)
    assert code == 0 and out.strip() == "cancel requested for live-000001"
    assert kinds(tmp_path)[-1] == "cancel"
    assert state_of(tmp_path, "live-000001") is JobState.QUEUED


def test_a_command_holding_the_lock_for_a_moment_never_stops_a_controller(tmp_path: Path) -> None:
    fd = try_lock(tmp_path)
    assert fd is not None
    threading.Timer(0.2, os.close, (fd,)).start()
    began = time.monotonic()
    mine = lock_for_controller(tmp_path)
    assert mine is not None and time.monotonic() - began < 2
    try:
        assert try_lock(tmp_path) is None  # and it holds it now
    finally:
        os.close(mine)


def test_a_lock_that_cannot_be_opened_is_one_line(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    store_job(tmp_path, "lock-000001")
    (tmp_path / "controller.lock").mkdir()  # not a file: open() fails
    code, _, err = perdure(capsys, tmp_path, "cancel", "lock-000001")
    assert code == 2 and "controller.lock: cannot be opened" in err and "Traceback" not in err


def test_submit_says_when_no_controller_will_pick_the_job_up(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: waits\npools: [{name: w, command: [python, -c, pass]}]\n")
    code, out, err = perdure(capsys, tmp_path / "state", "submit", str(spec))
    assert code == 0 and out.strip().startswith("waits-") and len(out.split()) == 1
    assert "no controller is running" in err and "perdure controller --state-dir" in err
    fd = lock_for_controller(tmp_path / "state")
    assert fd is not None
    try:
        code, out, err = perdure(capsys, tmp_path / "state", "submit", str(spec))
    finally:
        os.close(fd)
    assert code == 0 and err == ""
