"""Helpers for the local backend's integration tests (no tests here): tiny `python -c` children."""

from __future__ import annotations

import itertools
import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from perdure.backends.base import NodeInfo
from perdure.backends.local import LocalBackend
from perdure.backends.node import procs
from perdure.core.events import Launch, Observation, ReplicaExited, ReplicaStarted

NODES = [NodeInfo("a", 2), NodeInfo("b", 2)]
_ids = itertools.count()


def make_launch(
    tmp_path: Path,
    code: str,
    *,
    node: str = "a",
    memory_mb: int | None = None,
    replica: str = "worker-0",
    launch_id: str | None = None,
    env: dict[str, str] | None = None,
) -> Launch:
    launch_id = launch_id or f"l{next(_ids)}"
    return Launch(
        launch_id=launch_id,
        job_id="job",
        replica=replica,
        node=node,
        command=(sys.executable, "-c", code),
        env={"OMP_NUM_THREADS": "1", **(env or {})},
        cwd=str(tmp_path),
        memory_mb=memory_mb,
        log_prefix=str(tmp_path / "logs" / replica),
    )


def collect(
    backend: LocalBackend, until: set[str], kind: type = ReplicaExited, timeout: float = 15.0
) -> list[Observation]:
    """Poll until an observation of `kind` arrived for every launch id in `until`."""
    seen: list[Observation] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen.extend(backend.poll())
        done = {o.launch_id for o in seen if isinstance(o, kind)}
        if until <= done:
            return seen
        time.sleep(0.01)
    raise AssertionError(f"no {kind.__name__} for {until} within {timeout}s; saw {seen}")


def only(observations: list[Observation], kind: type, launch_id: str) -> Observation:
    found = [o for o in observations if isinstance(o, kind) and o.launch_id == launch_id]
    assert len(found) == 1, f"expected one {kind.__name__} for {launch_id}, got {observations}"
    return found[0]


def wait_started(backend: LocalBackend, launch_id: str) -> ReplicaStarted:
    seen = collect(backend, {launch_id}, ReplicaStarted)
    started = only(seen, ReplicaStarted, launch_id)
    assert isinstance(started, ReplicaStarted)
    return started


def wait_for_file(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout}s"
        time.sleep(0.01)


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def wait_gone(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs after {timeout}s"
        time.sleep(0.01)


# A child that says it is ready (so a test never races its start-up), then sleeps.
READY_THEN_SLEEP = (
    "import pathlib, signal, time\n"
    "{setup}\n"
    "pathlib.Path('{ready}').write_text('ok')\n"
    "time.sleep(60)\n"
)


def ready_child(tmp_path: Path, name: str, setup: str = "") -> tuple[str, Path]:
    ready = tmp_path / f"{name}.ready"
    return READY_THEN_SLEEP.format(setup=setup, ready=ready), ready


IGNORE_SIGTERM = "signal.signal(signal.SIGTERM, signal.SIG_IGN)"
SIGKILL = int(signal.SIGKILL)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    """A backend on a fresh state dir; whatever still runs at the end is killed."""
    local = LocalBackend(tmp_path / "state", NODES)
    yield local
    local.close()
    kill_everything(tmp_path / "state")


def kill_everything(state_dir: Path) -> None:
    """SIGKILL every supervisor and replica under `state_dir` (test teardown only)."""
    for status_file in (state_dir / "launches").glob("*/status.json"):
        status = json.loads(status_file.read_text())
        procs.send_signal(status["supervisor_pid"], status["supervisor_start_ticks"], SIGKILL)
        procs.send_signal(status["pid"], status["start_ticks"], SIGKILL)
