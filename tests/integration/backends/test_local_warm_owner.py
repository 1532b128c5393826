"""The warm pool never outlives the controller that owns it (issue 20, item 1).

A controller killed with SIGKILL cannot close anything: the spawner, its template and the
standbys must notice on their own. Here the controller's pipe to the spawner is also held
open by a process it forked (a descriptor that leaked into a survivor), so end of input never
comes: only watching the owner itself ends the pool. With the spawner stopped as well
(SIGSTOP: it can neither read nor exit), the template and the standbys must still go.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_local_support import wait_gone

from perdure.backends.node import procs, warm

OWNER = """
import os, sys, time
from perdure.backends.base import NodeInfo
from perdure.backends.local import LocalBackend
backend = LocalBackend(sys.argv[1], [NodeInfo("a", 2)], warm_pool=2, warm_idle=600)
backend.prewarm()
if os.fork() == 0:  # a child that keeps every descriptor of the controller: the pipe too
    time.sleep(300)
    os._exit(0)
print("up", flush=True)
time.sleep(300)
"""


def pool_processes(spawner: int) -> list[tuple[int, int]]:
    """(pid, start ticks) of the spawner and everything under it."""
    out = []
    for pid in procs.tree(spawner):
        info = procs.stat(pid)
        if info is not None and info.alive:
            out.append((pid, info.start_ticks))
    return out


def alive(pid: int, ticks: int) -> bool:
    return procs.is_alive(pid, ticks)


@pytest.mark.parametrize("spawner_stopped", [False, True], ids=["pipe-held", "spawner-stopped"])
def test_a_killed_controller_leaves_no_warm_pool(tmp_path: Path, spawner_stopped: bool) -> None:
    state = tmp_path / "state"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(state)], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    status_path = state / "launches" / ".warm.json"
    spawner = 0
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "up"
        deadline = time.monotonic() + 120  # the template imports torch: slow on a loaded box
        status: dict[str, object] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                status = json.loads(status_path.read_text())
            if status.get("ready", 0) >= 1:  # type: ignore[operator]
                break
            time.sleep(0.1)
        assert status.get("ready", 0) >= 1, f"the pool never had a standby ready: {status}"  # type: ignore[operator]
        spawner = int(status["spawner_pid"])  # type: ignore[call-overload]
        pool = pool_processes(spawner)
        assert len(pool) >= 3, pool  # the spawner, the template, a standby (and its child)
        if spawner_stopped:
            os.kill(spawner, signal.SIGSTOP)
            pool = [(p, t) for p, t in pool if p != spawner]
        owner.kill()  # SIGKILL: the controller closes nothing
        owner.wait()
        deadline = time.monotonic() + 30
        while (left := [p for p, t in pool if alive(p, t)]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"the warm pool outlived its controller: {left}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(owner.pid, signal.SIGKILL)  # the descriptor-holding child too
        if spawner:
            with contextlib.suppress(ProcessLookupError):
                os.kill(spawner, signal.SIGKILL)
                wait_gone(spawner, timeout=10)


def test_the_pool_size_and_idle_time_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    assert warm.pool_size(warm.MAX_POOL) == warm.MAX_POOL
    for too_many in ("100000", str(warm.MAX_POOL + 1)):
        monkeypatch.setenv(warm.POOL_ENV, too_many)
        with pytest.raises(ValueError, match=rf"'{too_many}' .*PERDURE_WARM_POOL.* from 0 to "
                                             rf"{warm.MAX_POOL}"):
            warm.pool_size(None)
    monkeypatch.setenv(warm.IDLE_ENV, "1e12")
    with pytest.raises(ValueError, match=r"'1e12' .*PERDURE_WARM_IDLE_SECONDS.* at most 604800"):
        warm.idle_seconds(None)
    assert warm.idle_seconds(warm.MAX_IDLE_SECONDS) == warm.MAX_IDLE_SECONDS


@pytest.mark.parametrize(("name", "value", "allowed"), [
    (warm.POOL_ENV, "100000", f"from 0 to {warm.MAX_POOL}"),
    (warm.IDLE_ENV, "1e12", "at most 604800"),
])
def test_perdure_run_refuses_a_pool_beyond_the_cap(tmp_path: Path, name: str, value: str,
                                                   allowed: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: j\npools: [{name: w, command: [python, -c, 'pass']}]\n")
    out = subprocess.run(
        [sys.executable, "-m", "perdure.cli.main", "--state-dir", str(tmp_path / "state"),
         "run", str(spec)], capture_output=True, text=True, timeout=120,
        env={**os.environ, name: value})
    assert out.returncode != 0
    assert name in out.stderr and repr(value) in out.stderr and allowed in out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    assert not (tmp_path / "state" / "launches").exists()  # nothing was started
