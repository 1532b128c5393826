"""Notices on Ray: node preemption, a Ray drain with a deadline, hot-swap when a host dies."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from raytest import RayPerdure

_path = Path(__file__).resolve().parents[1] / "controller" / "test_preemption.py"
_spec = importlib.util.spec_from_file_location("perdure_preemption_cases", _path)
assert _spec is not None and _spec.loader is not None
cases: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

NODE_ID = ("import json, ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
           "print(json.dumps({n['NodeManagerAddress']: n['NodeID'] for n in ray.nodes() "
           "if n['Alive']}))")


def ray_node_id(p: RayPerdure, host: str) -> str:
    r = subprocess.run([sys.executable, "-c", NODE_ID, p.hosts.head_address], check=True,
                       capture_output=True, text=True, timeout=60, env=p.hosts.env())
    ids: dict[str, str] = json.loads(r.stdout.strip().splitlines()[-1])
    return ids[p.hosts.hosts[host].address]


def ray_drain(p: RayPerdure, host: str, deadline_s: int) -> None:
    """Ray's own preemption signal: `ray drain-node` with a deadline."""
    ray_cli = str(Path(sys.executable).with_name("ray"))
    subprocess.run([ray_cli, "drain-node", "--address", p.hosts.head_address, "--node-id",
                    ray_node_id(p, host), "--reason", "DRAIN_NODE_REASON_PREEMPTION",
                    "--reason-message", "perdure test", "--deadline-remaining-seconds",
                    str(deadline_s)], check=True, capture_output=True, timeout=60,
                   env=p.hosts.env())


@pytest.mark.ray_long
def test_node_preemption_on_ray(ray_perdure: RayPerdure) -> None:
    cases.test_node_preemption_requeues_the_job_elsewhere(ray_perdure)


@pytest.mark.ray_long
def test_hot_swap_on_ray(ray_perdure: RayPerdure) -> None:
    cases.test_hot_swap_takes_capacity_from_a_lower_priority_job(ray_perdure)


@pytest.mark.ray_long
@pytest.mark.timeout(300)
def test_ray_drain_with_deadline_saves_suspends_and_resumes(ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    script = cases.write_script(p)
    marks = p.root / "marks"
    spec = p.spec("drained", 2, ["python", script], env={"MARKS": str(marks), "RUN_FOR": "8"})
    cluster = p.ray_cluster({"a": 2, "b": 2})
    p.cli("submit", str(spec), "--cluster", str(cluster))
    ctl = p.popen("controller", "--cluster", str(cluster))
    try:
        d = p.wait("drained", lambda d: d["state"] == "RUNNING", timeout=60)
        [node] = {x["node"] for x in d["replicas"]}
        cases.wait_ready(marks, ["worker-0-1", "worker-1-1"])
        began = time.time()
        ray_drain(p, node, 60)
        d = p.wait("drained", lambda d: d["state"] == "SUCCEEDED", timeout=120)
        events = [e["message"] for e in d["events"]]
        assert any("SUSPENDED" in m for m in events), events
        assert sorted(x.name for x in marks.iterdir() if not x.name.endswith(".ready")) == [
            "worker-0-1", "worker-1-1"]  # both saved on the notice
        assert d["attempt"] == 2 and all(x["node"] != node for x in d["replicas"])
        assert d["retries"] == {} and all(x["restarts"] == 0 for x in d["replicas"])
        suspended = next(e["time"] for e in d["events"] if "SUSPENDED" in e["message"])
        assert suspended - began < 10
    finally:
        ctl.kill()
        ctl.wait()
        p.hosts.kill(node)  # a drained Ray node takes nothing new: start it afresh
        p.hosts.start(node)


@pytest.mark.ray_long
@pytest.mark.timeout(300)
def test_hot_swap_when_a_host_dies(ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    script = cases.write_script(p)
    cluster = p.ray_cluster({"a": 2, "b": 2})
    (p.root / "marks-low").mkdir()
    high = p.cli("submit", str(p.spec("high", 2, ["python", script],
                                      env={"MARKS": str(p.root / "marks")}, priority=10)),
                 "--cluster", str(cluster)).stdout.strip()
    ctl = p.popen("controller", "--cluster", str(cluster))
    try:
        d = p.wait(high, lambda d: d["state"] == "RUNNING", timeout=60)
        low = p.cli("submit", str(p.spec("low", 2, ["python", script],
                                         env={"MARKS": str(p.root / "marks-low")},
                                         priority=1))).stdout.strip()
        p.wait(low, lambda d: d["state"] == "RUNNING", timeout=60)
        cases.wait_ready(p.root / "marks-low", ["worker-0-1", "worker-1-1"])
        [node] = {x["node"] for x in d["replicas"]}
        assert p.hosts.kill(node) > 0
        d = p.wait(high, lambda d: d["state"] == "RUNNING"
                   and all(r["node"] not in (node, None) for r in d["replicas"]), timeout=60)
        assert any(f"hot-swap: preempting {low}" in e["message"] for e in d["events"])
        lo = p.wait(low, lambda d: d["state"] == "QUEUED", timeout=30)
        assert any(f"capacity goes to {high}" in e["message"] for e in lo["events"])
        assert (p.root / "marks-low" / "worker-0-1").exists()  # low saved, then left
        for j in (high, low):
            p.cli("cancel", j)
    finally:
        ctl.kill()
        ctl.wait()
