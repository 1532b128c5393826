"""Node health on Ray (issue 38): the cluster file's preflight runs on each node before an
attempt's replicas start there; a host that fails it is quarantined, its replicas go
elsewhere, and nothing is placed on it until `perdure node restore` lifts the quarantine; a
host Ray drains has its replicas moved before it is taken; a held spare host is checked
before its warm pool fills."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from raytest import RayPerdure
from test_ray_preemption import ray_node_id
from test_ray_warm import agent_pool
from tests.helpers.stopping import stop_controller

# Fails on host b for the job named pre (its first job), passes everywhere else; each run
# leaves a mark naming its node and job.
CHECK = """import os, pathlib, sys
node, job = os.environ["PERDURE_NODE"], os.environ["PERDURE_JOB_ID"]
pathlib.Path({marks!r}, f"{{node}}.{{job.split('-')[0]}}").touch()
print("PASS cpu: matmul fine")
if node == "b" and job.startswith("pre-"):
    print("FAIL gpu 0 ecc: 3 uncorrected ECC errors since the driver loaded")
    sys.exit(1)
"""
HOLD = "import time; time.sleep(600)\n"
RAN = ("import os, pathlib\n"
       "pathlib.Path({ran!r}, os.environ['PERDURE_JOB_ID'].split('-')[0] + '.' + "
       "os.environ['PERDURE_REPLICA']).write_text(os.environ['PERDURE_NODE'])")


def node_line(p: RayPerdure, node: str) -> str:
    """The node's line of `perdure node ls`."""
    listed = p.cli("node", "ls").stdout
    return next(x for x in listed.splitlines() if x.startswith(f"{node} "))


def finished(p: RayPerdure, name: str) -> dict[str, Any]:
    d = p.wait(name, lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=180)
    assert d["state"] == "SUCCEEDED", d["events"][-10:]
    return d


@pytest.mark.ray_long
@pytest.mark.timeout(400)
def test_a_ray_host_failing_its_preflight_is_fenced_until_restored(
        ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    marks, ran = p.root / "checked", p.root / "ran"
    marks.mkdir()
    ran.mkdir()
    check = p.write("check.py", CHECK.format(marks=str(marks)))
    cluster = p.ray_cluster({"a": 4, "b": 2})  # best fit puts a 2-replica job on b
    data = yaml.safe_load(cluster.read_text())
    data["health"] = {"preflight": ["python", str(check)], "timeout_seconds": 60}
    cluster.write_text(yaml.safe_dump(data))
    command = ["python", "-c", RAN.format(ran=str(ran))]
    ctl = p.popen("controller", "--cluster", str(cluster))
    try:
        began = time.monotonic()
        p.cli("submit", str(p.spec("pre", 2, command)), "--cluster", str(cluster))
        d = finished(p, "pre")
        took = time.monotonic() - began
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]  # type: ignore
        messages = [e["message"] for e in d["events"]]
        assert "move worker-0, worker-1 off node b (quarantined, no restart)" in messages, (
            messages)
        assert {x.name for x in marks.iterdir()} >= {"a.pre", "b.pre"}
        why = (f"health check failed: `python {check}` exited 1: FAIL gpu 0 ecc: 3 "
               "uncorrected ECC errors since the driver loaded")
        listed = p.cli("node", "ls").stdout
        b = next(x for x in listed.splitlines() if x.startswith("b "))
        assert b.endswith(f"QUARANTINED  {why}"), listed

        # Quarantined: a job that best fit would put on b goes to a.
        p.cli("submit", str(p.spec("fenced", 2, command)), "--cluster", str(cluster))
        finished(p, "fenced")
        # Restored: b takes work again (and passes the check, for this job).
        p.cli("node", "restore", "b")
        p.cli("submit", str(p.spec("back", 2, command)), "--cluster", str(cluster))
        finished(p, "back")
        where = {x.name: x.read_text() for x in ran.iterdir()}
        assert where == {"pre.worker-0": "a", "pre.worker-1": "a",
                         "fenced.worker-0": "a", "fenced.worker-1": "a",
                         "back.worker-0": "b", "back.worker-1": "b"}, where
        assert "b.back" in {x.name for x in marks.iterdir()}
        print(f"pre: placed on a after b failed its check in {took:.1f}s")
    finally:
        stop_controller(ctl)


WAIT = ("import os, pathlib, time\n"
        "ran = pathlib.Path({ran!r})\n"
        "(ran / (os.environ['PERDURE_REPLICA'] + '.' + os.environ['PERDURE_NODE'])).touch()\n"
        "while not (ran / 'finish').exists():\n    time.sleep(0.2)")


@pytest.mark.ray_long
@pytest.mark.timeout(300)
def test_a_host_ray_drains_has_its_replicas_moved(ray_perdure: RayPerdure) -> None:
    """`ray drain-node` without a deadline (an operator's maintenance): the replicas move
    to another host, keeping their identity, no restart charged, Ray named as the cause."""
    p = ray_perdure
    ran = p.root / "ran"
    ran.mkdir()
    cluster = p.ray_cluster({"a": 4, "b": 2})  # best fit puts the job on b
    spec = p.spec("drained", 2, ["python", "-c", WAIT.format(ran=str(ran))])
    ctl = p.popen("controller", "--cluster", str(cluster))
    try:
        p.cli("submit", str(spec), "--cluster", str(cluster))
        d = p.wait("drained", lambda d: d["state"] == "RUNNING", timeout=120)
        assert {x["node"] for x in d["replicas"]} == {"b"}, d["replicas"]
        ray_cli = str(Path(sys.executable).with_name("ray"))
        subprocess.run([ray_cli, "drain-node", "--address", p.hosts.head_address, "--node-id",
                        ray_node_id(p, "b"), "--reason", "DRAIN_NODE_REASON_PREEMPTION",
                        "--reason-message", "host maintenance"], check=True,
                       capture_output=True, timeout=60, env=p.hosts.env())
        began = time.monotonic()
        d = p.wait("drained", lambda d: d["state"] == "RUNNING" and all(
            x["node"] == "a" for x in d["replicas"]), timeout=120)
        took = time.monotonic() - began
        messages = [e["message"] for e in d["events"]]
        assert "move worker-0, worker-1 off node b (Ray drains it, no restart)" in messages, (
            messages)
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
        assert d["attempt"] == 1 and d["retries"] == {}
        (ran / "finish").touch()
        finished(p, "drained")
        assert {x.name for x in ran.iterdir()} == {"worker-0.b", "worker-1.b", "worker-0.a",
                                                    "worker-1.a", "finish"}
        print(f"drained: replicas on a {took:.1f}s after the drain")
    finally:
        stop_controller(ctl)


# Fails on host a when it is checked as a spare (no job's attempt: no PERDURE_JOB_ID).
SPARE_CHECK = """import os, sys
if os.environ["PERDURE_NODE"] == "a" and "PERDURE_JOB_ID" not in os.environ:
    print("FAIL disk staging: /tmp: 0.1 GiB free (floor 1)")
    sys.exit(1)
"""


@pytest.mark.ray_long
@pytest.mark.timeout(300)
def test_a_spare_host_failing_its_preflight_is_fenced_before_its_pool_warms(
        ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    check = p.write("check.py", SPARE_CHECK)
    cluster = p.ray_cluster({"a": 4, "b": 2})  # the job on b, a held as its spare
    data = yaml.safe_load(cluster.read_text())
    data["health"] = {"preflight": ["python", str(check)], "timeout_seconds": 60}
    cluster.write_text(yaml.safe_dump(data))
    spec = p.spec("spared", 2, ["python", str(p.write("hold.py", HOLD))], pool={"spares": 1})
    ctl = p.popen("controller", "--cluster", str(cluster))
    try:
        p.cli("submit", str(spec), "--cluster", str(cluster))
        deadline = time.monotonic() + 120
        while "QUARANTINED" not in (a := node_line(p, "a")):
            assert time.monotonic() < deadline, a
            time.sleep(1)
        assert a.endswith(f"QUARANTINED  health check failed: `python {check}` exited 1: "
                          "FAIL disk staging: /tmp: 0.1 GiB free (floor 1)"), a
        d = p.wait("spared", lambda d: d["state"] == "RUNNING", timeout=60)
        assert {x["node"] for x in d["replicas"]} == {"b"}, d["replicas"]
        pool = agent_pool(p, "a")  # None: its spawner never wrote a pool's status
        assert not pool or pool.get("ready", 0) == 0, pool  # never warmed
    finally:
        stop_controller(ctl)
