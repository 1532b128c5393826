"""Memory limits: over the limit is an OOM (exit 137, oom=True); a kill -9 is not."""

from __future__ import annotations

import json
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
    ready_child,
    wait_for_file,
)

from perdure.backends.local import LocalBackend
from perdure.backends.node import memory
from perdure.backends.node.replicas import signal_replica
from perdure.core.events import LaunchFailed, ReplicaExited, ReplicaStarted

# Touch every page so the allocation is resident, then linger.
HOG = "x = bytearray(200 * 1024 * 1024)\nimport time\ntime.sleep(5)\n"


def _cgroup_v1_available() -> bool:
    try:
        memory.own_cgroup_dir("cgroup-v1")
        return True
    except OSError:
        return False


MECHANISMS = [
    pytest.param(
        "cgroup-v1",
        marks=pytest.mark.skipif(
            not _cgroup_v1_available(), reason="no writable cgroup v1 memory controller here"
        ),
    ),
    "rss",
    "auto",
]


@pytest.fixture(params=MECHANISMS)
def mechanism(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield request.param
    kill_everything(tmp_path / "state")


def _status(tmp_path: Path, launch_id: str) -> dict[str, object]:
    path = tmp_path / "state" / "launches" / launch_id / "status.json"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_over_the_limit_is_out_of_memory(mechanism: str, tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "state", NODES, memory_mechanism=mechanism)
    launch = make_launch(tmp_path, HOG, memory_mb=64)
    backend.launch(launch)
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited)
    assert (exited.exit_code, exited.signal, exited.oom) == (137, SIGKILL, True)
    used = _status(tmp_path, launch.launch_id)["memory_mechanism"]
    assert used == mechanism or mechanism == "auto"
    assert used in ("cgroup-v1", "cgroup-v2", "rss")
    if used != "rss":  # the cgroup is removed after the exit
        cgroup = _status(tmp_path, launch.launch_id)["cgroup"]
        assert isinstance(cgroup, str) and not Path(cgroup).exists()
        # ... and so is the `perdure` cgroup holding it, once no replica uses it.
        assert not Path(cgroup).parent.exists()


def test_kill_9_under_a_limit_is_not_out_of_memory(mechanism: str, tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "state", NODES, memory_mechanism=mechanism)
    code, ready = ready_child(tmp_path, "victim")
    launch = make_launch(tmp_path, code, memory_mb=256)
    backend.launch(launch)
    wait_for_file(ready)
    # the replica can be ready before its supervisor has recorded its pid
    wait_for_file(tmp_path / "state" / "launches" / launch.launch_id / "status.json")
    signal_replica(tmp_path / "state", launch.launch_id, signal.SIGKILL)
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited)
    assert (exited.exit_code, exited.signal, exited.oom) == (137, SIGKILL, False)


def test_under_the_limit_runs_and_reports_peak_rss(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "state", NODES, memory_mechanism="rss")
    code = "x = bytearray(60 * 1024 * 1024)\nimport time\ntime.sleep(0.3)\n"
    launch = make_launch(tmp_path, code, memory_mb=512)
    backend.launch(launch)
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited)
    assert (exited.exit_code, exited.oom) == (0, False)
    assert exited.peak_rss_mb is not None and 60 <= exited.peak_rss_mb < 200


def test_an_unknown_mechanism_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="memory_mechanism='cgroup-v3' is unknown"):
        LocalBackend(tmp_path / "state", NODES, memory_mechanism="cgroup-v3")


def _unavailable() -> str | None:
    for version in ("cgroup-v2", "cgroup-v1"):
        try:
            memory.limit_for("probe-unavailable", 64, version).close()
        except memory.MemoryLimitError:
            return version
    return None


@pytest.mark.skipif(_unavailable() is None, reason="both cgroup versions are usable here")
def test_an_unavailable_mechanism_fails_the_launch_with_the_reason(tmp_path: Path) -> None:
    version = _unavailable()
    assert version is not None
    backend = LocalBackend(tmp_path / "state", NODES, memory_mechanism=version)
    launch = make_launch(tmp_path, "pass", memory_mb=64)
    backend.launch(launch)
    seen = collect(backend, {launch.launch_id}, LaunchFailed)
    failed = only(seen, LaunchFailed, launch.launch_id)
    assert isinstance(failed, LaunchFailed)
    assert f"memory mechanism '{version}' is not available" in failed.message
    assert not [o for o in seen if isinstance(o, ReplicaStarted)]


def test_cgroup_v2_files_in_a_delegated_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cgroup v2 bookkeeping, on a stand-in directory: this host has no v2 memory
    controller, so this checks the files written and read, not the kernel's enforcement."""
    parent = tmp_path / "delegated"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("cpu memory pids\n")
    (parent / "cgroup.subtree_control").write_text("")
    monkeypatch.setenv(memory.CGROUP_PARENT_ENV, str(parent))
    limit = memory.limit_for("launch-1", 64, "cgroup-v2")
    assert limit.mechanism == "cgroup-v2" and limit.path == str(parent / "launch-1")
    assert (parent / "cgroup.subtree_control").read_text() == "+memory"
    assert (parent / "launch-1" / "memory.max").read_text() == str(64 * 2**20)
    assert (parent / "launch-1" / "memory.swap.max").read_text() == "0"
    assert not limit.oom_killed()
    (parent / "launch-1" / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    (parent / "launch-1" / "memory.peak").write_text(str(70 * 2**20))
    assert limit.oom_killed() and limit.peak_bytes() == 70 * 2**20
    with pytest.raises(memory.MemoryLimitError, match="is a cgroup-v2 directory, not cgroup-v1"):
        memory.limit_for("launch-2", 64, "cgroup-v1")
