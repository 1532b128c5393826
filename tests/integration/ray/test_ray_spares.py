"""Spares on Ray: a spare node (`spares: 1`) takes a lost host's replicas at once, and spare
launch actors (started on every node ahead of need) take launches without a Ray worker start."""

from __future__ import annotations

import time

import pytest
from raytest import RayPerdure, named_actors
from test_ray_warm import agent_pool
from tests.helpers.stopping import stop_controller

from perdure import statedir

HOLD = "import time; time.sleep(600)\n"  # a script: `python -c` never starts warm
# A launch that takes a spare actor starts its replica this soon after the call reached it
# (a Ray worker start, which it skips, is ~1.7 s here; generous for a loaded machine).
QUICK_SECONDS = 1.5


def _statuses(p: RayPerdure, job: str) -> dict[str, dict[str, object]]:
    """launch id -> the status record of each of the job's launches that started."""
    out = {}
    for d in (p.state / statedir.LAUNCHES).glob(f"{job}*"):
        status = statedir.read_json(d / statedir.STATUS)
        if status is not None:
            out[d.name] = status
    return out


def _spares_up(p: RayPerdure, want: set[str], timeout: float = 60) -> list[str]:
    """The namespace's spare launch actors, once every node in `want` has at least one."""
    deadline = time.monotonic() + timeout
    while True:
        spares = [n for n in named_actors(p) if n.startswith("spare:")]
        if {n.split(":")[1] for n in spares} >= want:
            return spares
        assert time.monotonic() < deadline, f"no spare launch actors on {want}: {spares}"
        time.sleep(0.5)


@pytest.mark.ray_long
@pytest.mark.timeout(300)
def test_a_lost_host_is_replaced_by_the_spare_node(ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    cluster = p.ray_cluster({"a": 2, "b": 2})
    script = p.write("hold.py", HOLD)
    controller = p.popen("controller", "--cluster", str(cluster))
    try:
        _spares_up(p, {"a", "b"})
        spec = p.spec("spare", 2, ["python", str(script)], pool={"spares": 1})
        p.cli("submit", str(spec), "--cluster", str(cluster))
        d = p.wait("spare", lambda d: d["state"] == "RUNNING" and bool(d.get("spares")),
                   timeout=90)
        (lost,) = {r["node"] for r in d["replicas"]}  # best fit: both on one node
        (spare,) = d["spares"]
        assert spare != lost
        # The spare node is warm before it is needed: its pool filled while no launch ran there
        deadline = time.monotonic() + 90
        while (pool := agent_pool(p, spare)).get("ready", 0) < 2 or pool.get("used"):
            assert time.monotonic() < deadline, f"the spare node's pool never filled: {pool}"
            time.sleep(1)
        before = set(_statuses(p, "spare"))
        killed_at = time.time()
        assert p.hosts.kill(lost) > 0
        d = p.wait("spare", lambda d: d["state"] == "RUNNING" and all(
            r["node"] == spare and r["state"] == "RUNNING" for r in d["replicas"]), timeout=90)
        took = time.time() - killed_at
        messages = [e["message"] for e in d["events"]]
        assert any(m.startswith(f"spare node {spare} took") for m in messages), messages
        assert len(d["replicas"]) == 2 and all(r["restarts"] == 0 for r in d["replicas"]), d
        # the replacements took the spare node's spare launch actors: no Ray worker start
        new = {k: v for k, v in _statuses(p, "spare").items() if k not in before}
        assert len(new) == 2, new
        for status in new.values():
            assert status["prestarted"] is True and status["warm"] is True, status
            assert float(status["started_at"]) - float(status["actor_created"]) \
                < QUICK_SECONDS, status  # type: ignore[arg-type]
        assert took < 30, f"the spare took {took:.1f} s to run the lost host's replicas"
        # The host comes back (a new Ray node, same resource): it becomes the new spare.
        p.hosts.start(lost)
        d = p.wait("spare", lambda d: list(d.get("spares") or []) == [lost], timeout=90)
        assert "Spare nodes" in p.cli("describe", "spare").stdout
        p.cli("cancel", "spare")
        p.wait("spare", lambda d: d["state"] == "CANCELLED" and not d.get("spares"),
               timeout=60)
    finally:
        out = stop_controller(controller)
    # A controller that stops kills the spare launch actors nobody took
    deadline = time.monotonic() + 30
    while any(n.startswith("spare:") for n in named_actors(p)):
        assert time.monotonic() < deadline, (named_actors(p), out[-2000:])
        time.sleep(0.5)


# Every Ray test's relaunch already goes through the spare actors; this one checks which
# actor took it (10-26 s): in make test-ray, to keep the default suite within its time.
@pytest.mark.ray_long
@pytest.mark.timeout(200)
def test_a_relaunch_takes_a_spare_launch_actor(ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    script = p.write("hold.py", HOLD)
    cluster = p.ray_cluster({"a": 1})
    controller = p.popen("controller", "--cluster", str(cluster))
    try:
        _spares_up(p, {"a"})
        spec = p.spec("hold", command=["python", str(script)],
                      restart={"max_replica_restarts": 3})
        p.cli("submit", str(spec), "--cluster", str(cluster))
        p.wait("hold", lambda d: d["replicas"][0]["state"] == "RUNNING",
               timeout=90)
        first = _statuses(p, "hold")
        assert [s["prestarted"] for s in first.values()] == [True], first
        p.cli("chaos", "kill", "hold", "worker-0")
        p.wait("hold", lambda d: d["replicas"][0]["restarts"] == 1
               and d["replicas"][0]["state"] == "RUNNING", timeout=90)
        ((launch, second),) = [(k, s) for k, s in _statuses(p, "hold").items()
                               if k not in first]
        assert second["prestarted"] is True, second
        assert float(second["started_at"]) - float(second["actor_created"]) \
            < QUICK_SECONDS, second  # type: ignore[arg-type]
        record = statedir.read_json(p.state / statedir.LAUNCHES / launch / statedir.LAUNCH) or {}
        assert str(record.get("actor", "")).startswith("spare:a:"), record
        # the spare it took is replaced: node a has its spares again
        _spares_up(p, {"a"})
        p.cli("cancel", "hold")
        p.wait("hold", lambda d: d["state"] == "CANCELLED", timeout=60)
    finally:
        stop_controller(controller)
