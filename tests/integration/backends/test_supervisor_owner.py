"""A supervisor that is not its launch owner's child (on Ray: forked by the node agent's spawner,
owned by a launch actor) dies with the owner, and takes its replica with it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from perdure import statedir
from perdure.backends.node import procs


def _launch(directory: Path, owner: subprocess.Popen[bytes]) -> None:
    info = procs.stat(owner.pid)
    assert info is not None
    directory.mkdir(parents=True)
    statedir.write_json(directory / statedir.LAUNCH, {
        "launch_id": directory.name, "command": ["sleep", "60"], "env": {},
        "cwd": str(directory), "memory_mb": None, "inherit_env": True,
        "stdout": str(directory / "out.log"), "stderr": str(directory / "err.log"),
        "owner": {"pid": owner.pid, "start_ticks": info.start_ticks}})


def _status(directory: Path, timeout: float = 20) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = statedir.read_json(directory / statedir.STATUS)
        if status is not None:
            return status
        time.sleep(0.02)
    raise AssertionError(f"the supervisor did not start the replica: "
                         f"{(directory / statedir.SUPERVISOR_LOG).read_text()}")


def test_supervisor_and_replica_die_with_the_owner(tmp_path: Path) -> None:
    owner = subprocess.Popen(["sleep", "60"])
    directory = tmp_path / "launches" / "owned"
    _launch(directory, owner)
    supervisor = subprocess.Popen([sys.executable, "-m", "perdure.backends.node.supervisor",
                                   str(directory)], start_new_session=True)
    try:
        status = _status(directory)
        replica = procs.stat(int(status["pid"]))
        assert replica is not None and supervisor.poll() is None
        assert not procs.wait_gone(replica.pid, replica.start_ticks, timeout=0.3)  # still runs
        owner.kill()
        owner.wait()
        began = time.monotonic()
        assert procs.wait_gone(replica.pid, replica.start_ticks, timeout=5), "replica outlived"
        assert supervisor.wait(timeout=5) == -9  # as PDEATHSIG would have killed it
        assert time.monotonic() - began < 2.0
        assert not (directory / statedir.EXIT).exists()  # its launch actor is gone: nobody reads
    finally:
        for proc in (owner, supervisor):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_an_owner_gone_before_the_start_starts_nothing_that_lingers(tmp_path: Path) -> None:
    owner = subprocess.Popen(["true"])
    owner.wait()
    directory = tmp_path / "launches" / "orphan"
    directory.mkdir(parents=True)
    # the owner's start ticks no longer match any live process: it counts as gone
    statedir.write_json(directory / statedir.LAUNCH, {
        "launch_id": "orphan", "command": ["sleep", "60"], "env": {}, "cwd": str(directory),
        "memory_mb": None, "stdout": str(directory / "out.log"),
        "stderr": str(directory / "err.log"), "owner": {"pid": owner.pid, "start_ticks": 1}})
    supervisor = subprocess.run([sys.executable, "-m", "perdure.backends.node.supervisor",
                                 str(directory)], timeout=20, check=False)
    assert supervisor.returncode == -9
    status = statedir.read_json(directory / statedir.STATUS)
    if status is not None:  # it may have started the replica before the watch fired
        assert procs.wait_gone(int(status["pid"]), int(status["start_ticks"]), timeout=5)
