"""An idle warm pool lets its template and standbys go (hundreds of MB each) and says so."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_local_support import NODES, kill_everything, wait_gone

from perdure.backends.local import LocalBackend
from perdure.backends.node import procs, warm
from perdure.backends.node.pool import summary as warm_pool_summary
from perdure.store.sqlite import Store


def wait_status(backend: LocalBackend, what: str, ok: Callable[[dict[str, Any]], object],
                timeout: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = backend.warm_pool_status() or {}
        if ok(status):
            return status
        time.sleep(0.05)
    raise AssertionError(f"the warm pool never got {what}: {backend.warm_pool_status()}")


def test_an_idle_pool_empties_and_node_ls_says_so(tmp_path: Path) -> None:
    state = tmp_path / "state"
    backend = LocalBackend(state, NODES, warm_pool=1, warm_idle=1.5)
    try:
        backend.prewarm()
        status = wait_status(backend, "a template",
                             lambda s: s.get("template") in ("warming", "ready"))
        spawner = int(status["spawner_pid"])
        pool = [p for p in procs.tree(spawner)[1:] if (info := procs.stat(p)) and info.alive]
        assert pool, "the pool started no process"
        status = wait_status(backend, "empty", lambda s: s.get("shrunk_at"))
        assert (status["ready"], status["warming"], status["template"]) == (0, 0, "off")
        for pid in pool:  # the template, its import, any standby: all gone
            wait_gone(pid, timeout=10.0)
        line = warm_pool_summary(state)
        assert line is not None and "warm pool: empty since" in line and "no launch for 2 s" in line
        Store(state / "perdure.db")  # what a controller on this state dir has made
        shown = subprocess.run(
            [sys.executable, "-m", "perdure.cli.main", "--state-dir", str(state), "node", "ls"],
            capture_output=True, text=True, check=True)
        assert "warm pool: empty since" in shown.stdout
        backend.prewarm()  # the next launch that can start warm fills it again
        wait_status(backend, "refilled", lambda s: s.get("active") and not s.get("shrunk_at"))
    finally:
        backend.close()
        kill_everything(state)


def test_the_idle_time_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(warm.IDLE_ENV, "soon")
    with pytest.raises(ValueError, match=r"'soon' .*PERDURE_WARM_IDLE_SECONDS.* > 0"):
        warm.idle_seconds(None)
    assert warm.idle_seconds(30) == 30.0
    monkeypatch.delenv(warm.IDLE_ENV)
    assert warm.idle_seconds(None) == warm.DEFAULT_IDLE_SECONDS
