"""Warm start on Ray nodes: the node agent's spawner hands launches to warm standbys, and a
warm-started replica still dies with its launch actor (it is not the actor's child)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from raytest import RayPerdure, kill_actors, named_actors

from perdure import statedir
from perdure.backends.node import procs

HOLD = "import os, time; print('replica', os.getpid(), flush=True); time.sleep(600)"

KILL_ONE = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
            "ray.kill(ray.get_actor(sys.argv[3], namespace=sys.argv[2]), no_restart=True)")


def _started(p: RayPerdure, seen: set[str], timeout: float = 60,
             prefix: str = "hold") -> tuple[str, dict[str, Any]]:
    """The next launch (not in `seen`) whose replica started: its id and status record."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for d in sorted((p.state / statedir.LAUNCHES).glob(f"{prefix}*")):
            status = statedir.read_json(d / statedir.STATUS)
            if d.name not in seen and status is not None:
                seen.add(d.name)
                return d.name, status
        time.sleep(0.1)
    raise AssertionError(f"no new launch started within {timeout} s (seen: {sorted(seen)})")


def _gone(pid: int, ticks: int, timeout: float) -> float | None:
    """Seconds until the process is gone, or None if it outlived `timeout`."""
    began = time.monotonic()
    return time.monotonic() - began if procs.wait_gone(pid, ticks, timeout) else None


@pytest.mark.ray_long
@pytest.mark.timeout(150)
def test_relaunch_starts_warm_and_dies_with_its_launch_actor(ray_perdure: RayPerdure,
                                                             tmp_path: Path) -> None:
    p = ray_perdure
    script = p.write("hold.py", HOLD)
    spec = p.spec("hold", command=["python", str(script)],
                  restart={"max_replica_restarts": 3})
    run = p.popen("run", str(spec), "--cluster", str(p.ray_cluster({"a": 1})))
    try:
        seen: set[str] = set()
        first, status = _started(p, seen, timeout=90)
        ticks = procs.stat(int(status["pid"]))
        assert ticks is not None, status
        # The launch actor dies (ray.kill, as the node's death or Ray's memory monitor would
        # kill it): the replica, a warm standby forked by the agent's spawner, dies with it.
        record = statedir.read_json(p.state / statedir.LAUNCHES / first / statedir.LAUNCH) or {}
        subprocess.run([sys.executable, "-c", KILL_ONE, p.hosts.head_address, p.namespace,
                        record.get("actor") or f"launch:{first}"], check=True, timeout=60,
                       env=p.hosts.env())
        took = _gone(int(status["pid"]), ticks.start_ticks, timeout=10)
        assert took is not None, f"replica {status['pid']} outlived its launch actor"
        # The controller relaunches it; the relaunch starts in a warm standby.
        second, again = _started(p, seen, timeout=60)
        assert again["warm"] is True and again["via"] == "agent", again
        assert again["started_at"] - again["actor_created"] < 3.0, again
        record = statedir.read_json(p.state / statedir.LAUNCHES / second / statedir.LAUNCH) or {}
        # what the warm replica printed on its node comes back to the controller's machine
        assert _log_soon(Path(record["log_prefix"] + ".out"), f"replica {again['pid']}")
        p.cli("cancel", "hold")
        assert run.wait(timeout=60) != 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def _log_soon(path: Path, line: str, timeout: float = 10) -> bool:
    """Whether `line` reaches the controller's copy of a log (pulled from the node)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and line in path.read_text():
            return True
        time.sleep(0.2)
    return False


AGENT_POOL = ("import json, ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
              "agent = ray.get_actor(sys.argv[3], namespace=sys.argv[2]); "
              "print(json.dumps(ray.get(agent.warm_status.remote(), timeout=30)))")


def agent_pool(p: RayPerdure, node: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-c", AGENT_POOL, p.hosts.head_address, p.namespace,
                        f"node:{node}"], capture_output=True, text=True, timeout=60,
                       env=p.hosts.env(), check=True)
    status: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return status


@pytest.mark.ray_long
@pytest.mark.timeout(240)
def test_the_controllers_pool_settings_reach_the_nodes(ray_perdure: RayPerdure,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    p = ray_perdure
    script = p.write("quick.py", "print('done')\n")
    cluster = str(p.ray_cluster({"a": 1}))
    # An idle time of 3 s: the node's pool fills for the launch, then empties.
    monkeypatch.setenv("PERDURE_WARM_IDLE_SECONDS", "3")
    r = p.cli("run", str(p.spec("warm", command=["python", str(script)])), "--cluster", cluster,
              check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    _, status = _started(p, set(), timeout=5, prefix="warm")
    assert status["warm"] is True, status
    deadline = time.monotonic() + 30
    while (pool := agent_pool(p, "a")).get("shrunk_at") is None:
        assert time.monotonic() < deadline, f"the pool never emptied: {pool}"
        time.sleep(1)
    assert pool["idle_seconds"] == 3 and not pool["active"] and pool["used"] == 1, pool
    # A pool of 0 on the controller: new agents keep none, launches start cold.
    kill_actors(p)
    while "node:a" in named_actors(p):  # gone before the next controller makes its own
        assert time.monotonic() < deadline + 30, "node:a outlived ray.kill"
        time.sleep(0.5)
    monkeypatch.setenv("PERDURE_WARM_POOL", "0")
    r = p.cli("run", str(p.spec("cold", command=["python", str(script)])), "--cluster", cluster,
              check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    cold = [statedir.read_json(d / statedir.STATUS) or {}
            for d in (p.state / statedir.LAUNCHES).glob("cold*")]
    assert [(s.get("warm"), s.get("via")) for s in cold] == [(False, "agent")], cold
    assert agent_pool(p, "a")["disabled"], "a pool of 0 is off"
