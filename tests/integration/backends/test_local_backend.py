"""The local backend runs real replica processes: exits, signals, errors, stops, chaos, latency."""

from __future__ import annotations

import json
import signal
import statistics
import time
from dataclasses import replace
from pathlib import Path

import pytest
from test_local_support import (
    IGNORE_SIGTERM,
    SIGKILL,
    backend,
    collect,
    make_launch,
    only,
    ready_child,
    wait_for_file,
    wait_gone,
    wait_started,
)

from perdure.backends.base import LaunchError
from perdure.backends.local import LocalBackend
from perdure.backends.node.replicas import signal_replica
from perdure.core.events import LaunchFailed, ReplicaExited, ReplicaStarted, Stop

__all__ = ["backend"]  # the fixture, imported for pytest


def test_exit_code_environment_and_logs(backend: LocalBackend, tmp_path: Path) -> None:
    code = (
        "import json, os, sys\n"
        "keys = ['X', 'PERDURE_ERROR_FILE', 'TORCHELASTIC_ERROR_FILE', 'PYTHONUNBUFFERED']\n"
        "print(json.dumps({k: os.environ.get(k) for k in keys}))\n"
        "print(os.getcwd())\n"
        "sys.exit(3)\n"
    )
    launch = make_launch(tmp_path, code, env={"X": "from-launch"})
    before = time.time()
    backend.launch(launch)
    seen = collect(backend, {launch.launch_id})

    started = only(seen, ReplicaStarted, launch.launch_id)
    exited = only(seen, ReplicaExited, launch.launch_id)
    assert seen.index(started) < seen.index(exited)
    assert isinstance(started, ReplicaStarted) and isinstance(exited, ReplicaExited)
    assert started.pid > 0 and before <= started.time <= exited.time <= time.time()
    assert (exited.exit_code, exited.signal, exited.oom, exited.error) == (3, None, False, None)
    assert exited.peak_rss_mb is not None and exited.peak_rss_mb > 1

    out = (tmp_path / "logs" / "worker-0.out").read_text().splitlines()
    assert out[0].startswith(f"=== {launch.launch_id} started ")
    error_file = str(tmp_path / "state" / "launches" / launch.launch_id / "error.json")
    assert json.loads(out[1]) == {
        "X": "from-launch",
        "PERDURE_ERROR_FILE": error_file,
        "TORCHELASTIC_ERROR_FILE": error_file,
        "PYTHONUNBUFFERED": "1",
    }
    assert out[2] == str(tmp_path)
    assert backend.poll() == []  # reported once, then forgotten


def test_exit_by_signal_reports_128_plus_signal(backend: LocalBackend, tmp_path: Path) -> None:
    launch = make_launch(tmp_path, "import os; os.abort()")
    backend.launch(launch)
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited)
    assert (exited.exit_code, exited.signal, exited.oom) == (134, signal.SIGABRT, False)


def test_error_file_written_under_record(backend: LocalBackend, tmp_path: Path) -> None:
    code = (
        "from perdure.runtime.errors import record\n"
        "@record\n"
        "def train():\n"
        "    raise ValueError('bad shape')\n"
        "train()\n"
    )
    launch = make_launch(tmp_path, code)
    backend.launch(launch)
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited) and exited.error is not None
    assert exited.exit_code == 1
    assert (exited.error.type, exited.error.message) == ("ValueError", "bad shape")
    assert exited.error.source == "error_file"
    assert "in train" in exited.error.traceback


def test_torchelastic_error_file_is_read(backend: LocalBackend, tmp_path: Path) -> None:
    # What torchelastic's @record writes to $TORCHELASTIC_ERROR_FILE (without importing torch).
    code = (
        "import json, os, sys\n"
        "data = {'message': {'message': 'RuntimeError: NCCL timeout', 'extraInfo': "
        "{'py_callstack': 'Traceback ...', 'timestamp': '1'}}}\n"
        "open(os.environ['TORCHELASTIC_ERROR_FILE'], 'w').write(json.dumps(data))\n"
        "sys.exit(1)\n"
    )
    launch = make_launch(tmp_path, code)
    backend.launch(launch)
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited) and exited.error is not None
    assert exited.error.summary() == "RuntimeError: NCCL timeout"


def test_stderr_traceback_parsed_only_from_this_launch(
    backend: LocalBackend, tmp_path: Path
) -> None:
    code = (
        "class ShapeError(Exception): pass\n"
        "try:\n"
        "    raise KeyError('inner')\n"
        "except KeyError as e:\n"
        "    raise ShapeError('expected (4, 8)\\ngot (4, 9)') from e\n"
    )
    first = make_launch(tmp_path, code)
    backend.launch(first)
    exited = only(collect(backend, {first.launch_id}), ReplicaExited, first.launch_id)
    assert isinstance(exited, ReplicaExited) and exited.error is not None
    assert exited.error.source == "stderr"
    assert (exited.error.type, exited.error.message) == (
        "ShapeError",
        "expected (4, 8)\ngot (4, 9)",
    )

    # A restart of the same replica appends to the same log; its plain exit 2 has no error.
    second = make_launch(tmp_path, "import sys; sys.exit(2)")
    backend.launch(second)
    again = only(collect(backend, {second.launch_id}), ReplicaExited, second.launch_id)
    assert isinstance(again, ReplicaExited)
    assert (again.exit_code, again.error) == (2, None)
    err = (tmp_path / "logs" / "worker-0.err").read_text()
    assert err.count("=== ") == 2 and "ShapeError" in err


def test_stop_sigkills_a_replica_that_ignores_sigterm_after_grace(
    backend: LocalBackend, tmp_path: Path
) -> None:
    code, ready = ready_child(tmp_path, "stubborn", IGNORE_SIGTERM)
    launch = make_launch(tmp_path, code)
    backend.launch(launch)
    wait_for_file(ready)
    asked = time.time()
    backend.stop(Stop(launch.launch_id, signal.SIGTERM, grace=0.5, reason="test"))
    assert time.time() - asked < 0.05  # never blocks
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited)
    assert (exited.exit_code, exited.signal, exited.oom) == (137, SIGKILL, False)
    assert 0.45 <= exited.time - asked < 3.0


def test_stop_with_sigterm_ends_a_willing_replica_at_once(
    backend: LocalBackend, tmp_path: Path
) -> None:
    code, ready = ready_child(tmp_path, "willing")
    launch = make_launch(tmp_path, code)
    backend.launch(launch)
    wait_for_file(ready)
    asked = time.time()
    backend.stop(Stop(launch.launch_id, signal.SIGTERM, grace=30.0, reason="test"))
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited)
    assert (exited.exit_code, exited.signal) == (143, signal.SIGTERM)
    assert exited.time - asked < 1.0
    # Stopping what has exited is a no-op.
    backend.stop(Stop(launch.launch_id, signal.SIGTERM, grace=1.0, reason="again"))
    assert backend.poll() == []


def test_stop_before_the_replica_started_is_not_lost(backend: LocalBackend, tmp_path: Path) -> None:
    code, _ = ready_child(tmp_path, "early")
    launch = make_launch(tmp_path, code)
    backend.launch(launch)
    backend.stop(Stop(launch.launch_id, signal.SIGTERM, grace=1.0, reason="right away"))
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited) and exited.exit_code in (143, 137)


def test_replica_leftovers_are_killed_when_it_exits(backend: LocalBackend, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, pathlib\n"
        "p = subprocess.Popen(['sleep', '60'])\n"
        f"pathlib.Path('{pid_file}').write_text(str(p.pid))\n"
    )
    launch = make_launch(tmp_path, code)
    backend.launch(launch)
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited) and exited.exit_code == 0
    wait_gone(int(pid_file.read_text()))


def test_kill_node_sigkills_only_that_nodes_replicas(backend: LocalBackend, tmp_path: Path) -> None:
    launches = []
    for index, node in enumerate(["a", "a", "b"]):
        code, ready = ready_child(tmp_path, f"n{index}", IGNORE_SIGTERM)
        launch = make_launch(tmp_path, code, node=node, replica=f"worker-{index}")
        backend.launch(launch)
        launches.append((launch, ready))
    for _, ready in launches:
        wait_for_file(ready)
    backend.kill_node("a")
    on_a = {launch.launch_id for launch, _ in launches[:2]}
    seen = collect(backend, on_a)
    for launch_id in on_a:
        exited = only(seen, ReplicaExited, launch_id)
        assert isinstance(exited, ReplicaExited)
        assert (exited.exit_code, exited.signal, exited.oom) == (137, SIGKILL, False)
    survivor = launches[2][0].launch_id
    assert not [
        o for o in seen + backend.poll() if isinstance(o, ReplicaExited) and o.launch_id == survivor
    ]
    backend.stop(Stop(survivor, signal.SIGKILL, grace=0.0, reason="cleanup"))
    collect(backend, {survivor})


def test_signal_replica_targets_the_replica_not_its_supervisor(
    backend: LocalBackend, tmp_path: Path
) -> None:
    code, ready = ready_child(tmp_path, "target")
    launch = make_launch(tmp_path, code)
    backend.launch(launch)
    wait_for_file(ready)
    started = wait_started(backend, launch.launch_id)
    state = tmp_path / "state"
    assert signal_replica(state, launch.launch_id, signal.SIGTERM) == started.pid
    exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited) and exited.exit_code == 143
    with pytest.raises(ProcessLookupError, match="already exited"):
        signal_replica(state, launch.launch_id, signal.SIGTERM)
    with pytest.raises(ProcessLookupError, match="not started"):
        signal_replica(state, "no-such-launch", signal.SIGTERM)


def test_launch_errors_name_the_problem(backend: LocalBackend, tmp_path: Path) -> None:
    good = make_launch(tmp_path, "pass")
    cases = {
        "is not on its PATH": replace(good, command=("pyhton3", "x")),
        "does not exist": replace(good, command=("./train.sh",)),
        "working directory": replace(good, cwd=str(tmp_path / "nope")),
        "on node 'z'": replace(good, node="z"),
        "memory_mb=0": replace(good, memory_mb=0),
        "launch id must be": replace(good, launch_id="a/b"),
    }
    for message, launch in cases.items():
        with pytest.raises(LaunchError, match=message):
            backend.launch(launch)
    backend.launch(good)
    with pytest.raises(LaunchError, match="already"):
        backend.launch(good)
    collect(backend, {good.launch_id})
    assert not (tmp_path / "state" / "launches" / "pyhton3").exists()


def test_exec_failure_after_the_checks_is_a_launch_failure(
    backend: LocalBackend, tmp_path: Path
) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/no/such/interpreter\n")
    script.chmod(0o755)
    launch = replace(make_launch(tmp_path, ""), command=(str(script),))
    backend.launch(launch)  # executable as far as launch() can tell
    seen = collect(backend, {launch.launch_id}, LaunchFailed)
    failed = only(seen, LaunchFailed, launch.launch_id)
    assert isinstance(failed, LaunchFailed)
    assert str(script) in failed.message and "interpreter on its #! line" in failed.message
    assert not [o for o in seen if isinstance(o, ReplicaStarted | ReplicaExited)]


def test_launch_latency(backend: LocalBackend, tmp_path: Path) -> None:
    durations = []
    ids = set()
    for index in range(20):
        launch = make_launch(tmp_path, "pass", replica=f"worker-{index}")
        begin = time.perf_counter()
        backend.launch(launch)
        durations.append(time.perf_counter() - begin)
        ids.add(launch.launch_id)
    seen = []
    began = time.perf_counter()
    for _ in range(100):
        seen += backend.poll()
    poll_ms = (time.perf_counter() - began) * 10
    print(
        f"\nlaunch: median {statistics.median(durations) * 1e3:.2f} ms, "
        f"max {max(durations) * 1e3:.2f} ms; poll with 20 active: {poll_ms:.3f} ms"
    )
    assert max(durations) < 0.5
    ids -= {o.launch_id for o in seen if isinstance(o, ReplicaExited)}
    collect(backend, ids, timeout=30)
