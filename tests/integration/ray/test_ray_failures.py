"""Hosts and controllers that die under a running job on Ray: it ends bit-identical."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import RayPerdure, describe, named_actors

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ddp_mlp"
STEP = re.compile(r"^step (\d+) ", re.M)


def ddp(p: RayPerdure, name: str, epochs: int, step_time: float) -> Path:
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["name"] = name
    spec["pools"][0]["command"] = ["python", str(EXAMPLE / "train.py"), "--epochs", str(epochs),
                                   "--step-time", str(step_time), "--log-every", "5"]
    spec["checkpoint"] = {"every_steps": 10, "dir": str(p.root / f"ckpt-{name}")}
    return p.write(f"{name}.yaml", spec)


def reference_hash(p: RayPerdure, epochs: int) -> str:
    """The final weights of an uninterrupted run on the local backend (its pace is irrelevant)."""
    local = p.write("local.yaml", {"backend": "local", "nodes": [{"name": "a", "slots": 4}]})
    r = p.cli("run", str(ddp(p, "clean", epochs, 0.0)), "--cluster", str(local), check=False,
              timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return sha(p, "clean")


def sha(p: RayPerdure, name: str) -> str:
    return str(json.loads((p.root / f"ckpt-{name}" / "result.json").read_text())["sha256"])


def wait_step(p: RayPerdure, job: str, at_least: int, timeout: float = 90) -> int:
    """Wait until job `job`'s primary has logged step `at_least` (as mirrored here)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        steps = [int(s) for log in p.state.glob(f"logs/{job}-*/attempt-*/worker-*.out")
                 for s in STEP.findall(log.read_text())]
        if max(steps, default=-1) >= at_least:
            return max(steps)
        time.sleep(0.2)
    raise AssertionError(f"training never reached step {at_least}")


def wait_state(p: RayPerdure, job: str, states: tuple[str, ...], timeout: float) -> dict:
    return p.wait(job, lambda d: d["state"] in states, timeout=timeout)


@pytest.mark.timeout(420)
def test_host_b_dies_replicas_move_to_a_and_b_comes_back(ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    clean = reference_hash(p, 6)
    controller = p.popen("controller")  # nodes discovered from Ray: a (4 slots), b (2)
    try:
        p.cli("submit", str(ddp(p, "moved", 6, 0.1)))
        d = p.wait("moved", lambda d: d["state"] == "RUNNING", timeout=90)
        on_b = sorted(x["name"] for x in d["replicas"] if x["node"] == "b")
        assert on_b == ["worker-0", "worker-1"], d["replicas"]
        wait_step(p, "moved", 15)
        killed_at = time.time()
        assert p.hosts.kill("b") > 0
        d = wait_state(p, "moved", ("SUCCEEDED", "FAILED"), timeout=240)
        assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-15:])
        assert sha(p, "moved") == clean
        assert all(x["node"] == "a" for x in d["replicas"]), d["replicas"]
        lost = next(e for e in d["events"] if "node lost" in e["message"]
                    or "its replicas are lost" in e["message"])
        assert lost["time"] - killed_at < 8, "the host's death took too long to notice"
        # b comes back as a new Ray node with the same resource: the same perdure node
        p.hosts.start("b")
        p.cli("submit", str(p.spec("after", replicas=4, command=["python", "-c", "pass"])))
        d = wait_state(p, "after", ("SUCCEEDED", "FAILED"), timeout=120)
        assert d["state"] == "SUCCEEDED", d["events"]
        assert "b" in [x["node"] for x in d["replicas"]]
    finally:
        controller.send_signal(signal.SIGINT)
        out = controller.communicate(timeout=60)[0]
    assert "node b restored" in out, out[-3000:]


@pytest.mark.ray_long
@pytest.mark.timeout(420)
def test_controller_sigkill_reattaches_without_duplicates(ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    clean = reference_hash(p, 4)
    cluster = str(p.ray_cluster({"a": 2, "b": 2}))
    controller = p.popen("controller", "--cluster", cluster)
    p.cli("submit", str(ddp(p, "kept", 4, 0.1)), "--cluster", cluster)
    wait_step(p, "kept", 10)
    controller.kill()  # SIGKILL: the replicas keep running in their actors
    controller.wait()
    time.sleep(3.0)  # training goes on while no controller watches (nor copies its logs)
    second = p.popen("controller", "--cluster", cluster, "--exit-when-idle")
    out = second.communicate(timeout=240)[0]
    assert second.returncode == 0, out
    d = describe(p, "kept")
    assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-10:])
    assert "re-attached to 4 replicas" in out, out
    assert [x["restarts"] for x in d["replicas"]] == [0, 0, 0, 0]
    assert len(list((p.state / "launches").glob("kept-*"))) == 4  # no duplicate launch
    assert sha(p, "kept") == clean
    assert not [n for n in named_actors(p) if n.startswith("launch:")]  # no orphans


@pytest.mark.ray_long
@pytest.mark.timeout(300)
def test_exits_while_no_controller_watches_are_reported(ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    cluster = str(p.ray_cluster({"a": 2, "b": 2}))
    controller = p.popen("controller", "--cluster", cluster)
    code = "import time; time.sleep(6)"
    p.cli("submit", str(p.spec("outage", replicas=3, command=["python", "-c", code])),
          "--cluster", cluster)
    p.wait("outage", lambda d: d["state"] == "RUNNING", timeout=60)
    controller.kill()
    controller.wait()
    time.sleep(8)  # every replica exits meanwhile
    second = subprocess.run([*p.base(), "controller", "--cluster", cluster, "--exit-when-idle"],
                            capture_output=True, text=True, timeout=120, env=p.hosts.env())
    d = describe(p, "outage")
    assert "re-attached to 3 replicas" in second.stdout, second.stdout
    assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-10:])
    assert not [n for n in named_actors(p) if n.startswith("launch:")]
