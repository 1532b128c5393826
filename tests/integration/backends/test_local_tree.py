"""A replica's whole process tree ends with it, and a kernel OOM kill is named, with or without
`memory_mb`: every replica gets a cgroup of its own where one can be made (else the supervisor,
a subreaper, sweeps its descendants)."""

from __future__ import annotations

import json
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_local_support import (
    NODES,
    SIGKILL,
    collect,
    kill_everything,
    make_launch,
    only,
    wait_for_file,
    wait_gone,
)

from perdure.backends.local import LocalBackend
from perdure.backends.node import memory
from perdure.core.events import LaunchFailed, ReplicaExited


def _v1_dir() -> str | None:
    try:
        return memory.own_cgroup_dir("cgroup-v1")
    except OSError:
        return None


V1 = pytest.mark.skipif(_v1_dir() is None, reason="no writable cgroup v1 memory controller here")


def daemon_code(pid_file: Path, then: str = "") -> str:
    """A replica that leaves a `setsid`, double-forked daemon behind (then runs `then`)."""
    return (
        "import os, pathlib, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        pathlib.Path('{pid_file}.tmp').write_text(str(os.getpid()))\n"
        f"        os.rename('{pid_file}.tmp', '{pid_file}')\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        f"while not os.path.exists('{pid_file}'):\n"
        "    time.sleep(0.01)\n"
        f"{then}\n"
    )


def _kill(pid: int) -> None:
    """Teardown: a daemon the code under test failed to kill must not outlive the test."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "state"
    kill_everything(tmp_path / "state")


@pytest.mark.parametrize("mechanism", ["auto", "rss"])  # rss: no cgroup, the subreaper sweep
def test_a_daemon_a_replica_left_dies_with_it(mechanism: str, tmp_path: Path,
                                               state: Path) -> None:
    backend = LocalBackend(state, NODES, memory_mechanism=mechanism, warm_pool=0)
    pid_file = tmp_path / "daemon.pid"
    launch = make_launch(tmp_path, daemon_code(pid_file))
    backend.launch(launch)
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited) and exited.exit_code == 0
    try:
        wait_gone(int(pid_file.read_text()))
    finally:
        _kill(int(pid_file.read_text()))
        backend.close()
    status = json.loads((state / "launches" / launch.launch_id / "status.json").read_text())
    assert status["tree"] == ("subreaper" if mechanism == "rss" else status["memory_mechanism"])


@pytest.mark.parametrize("mechanism", [pytest.param("auto", marks=V1), "rss"])
def test_a_daemon_dies_even_when_the_supervisor_was_killed(mechanism: str, tmp_path: Path,
                                                           state: Path) -> None:
    """With a cgroup, its members are killed; without one (rss), the processes that carry
    the launch's error-file variable."""
    backend = LocalBackend(state, NODES, memory_mechanism=mechanism, warm_pool=0)
    pid_file = tmp_path / "daemon.pid"
    launch = make_launch(tmp_path, daemon_code(pid_file, "time.sleep(60)"))
    backend.launch(launch)
    wait_for_file(pid_file)
    status_path = state / "launches" / launch.launch_id / "status.json"
    wait_for_file(status_path)
    status = json.loads(status_path.read_text())
    if mechanism == "auto":
        assert status["cgroup"] and status["memory_mb"] is None  # a cgroup without a limit
    daemon = int(pid_file.read_text())
    try:
        os.kill(status["supervisor_pid"], signal.SIGKILL)
        lost = only(collect(backend, {launch.launch_id}, LaunchFailed), LaunchFailed,
                    launch.launch_id)
        assert "died without recording" in str(lost)
        wait_gone(daemon)
    finally:
        _kill(daemon)
        backend.close()
    assert status["cgroup"] is None or not Path(status["cgroup"]).exists()


@pytest.fixture
def small_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A parent cgroup of 96 MiB standing in for a host that runs out of memory."""
    own = _v1_dir()
    assert own is not None
    parent = Path(own) / f"perdure-test-{os.getpid()}-{secrets.token_hex(4)}"
    parent.mkdir()
    (parent / "memory.limit_in_bytes").write_text(str(96 << 20))
    monkeypatch.setenv(memory.CGROUP_PARENT_ENV, str(parent))
    yield parent
    for child in parent.iterdir():
        if child.is_dir():
            memory.remove_cgroup(str(child))
    parent.rmdir()


@V1
def test_a_kernel_oom_kill_without_memory_mb_is_out_of_memory(
        tmp_path: Path, state: Path, small_host: Path) -> None:
    backend = LocalBackend(state, NODES, warm_pool=0)
    launch = make_launch(tmp_path, "x = bytearray(200 << 20)\n")  # no memory_mb
    backend.launch(launch)
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    backend.close()
    assert isinstance(exited, ReplicaExited)
    assert (exited.exit_code, exited.signal, exited.oom) == (137, SIGKILL, True)


@V1
def test_a_plain_sigkill_without_memory_mb_is_not_out_of_memory(
        tmp_path: Path, state: Path) -> None:
    backend = LocalBackend(state, NODES, warm_pool=0)
    launch = make_launch(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    backend.launch(launch)
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    backend.close()
    assert isinstance(exited, ReplicaExited)
    assert (exited.exit_code, exited.oom) == (137, False)


def test_without_memory_mb_a_v2_cgroup_has_no_limit_but_counts_oom_kills(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cgroup v2 bookkeeping on a stand-in directory (this host has no v2 memory
    controller): no memory.max is written, memory.events is still read."""
    parent = tmp_path / "delegated"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("cpu memory pids\n")
    (parent / "cgroup.subtree_control").write_text("")
    monkeypatch.setenv(memory.CGROUP_PARENT_ENV, str(parent))
    tracked = memory.limit_for("launch-1", None, "auto")
    assert tracked.mechanism == "cgroup-v2" and tracked.path == str(parent / "launch-1")
    assert not (parent / "launch-1" / "memory.max").exists()
    assert not tracked.oom_killed()
    (parent / "launch-1" / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n")
    assert tracked.oom_killed()
    assert memory.limit_for("launch-2", None, "rss").mechanism == "none"  # the sweep only
