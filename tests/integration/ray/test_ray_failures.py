"""Hosts and controllers that die under a running job on Ray: it ends bit-identical."""

from __future__ import annotations

import subprocess
import time

import pytest
from raytest import RayPerdure, named_actors
from tests.helpers.clusterjobs import ddp_spec, describe, final_sha, wait_state, wait_step
from tests.helpers.stopping import stop_controller


def node_state(p: RayPerdure, name: str) -> str:
    """A node's state as `perdure node ls` prints it (`b            2 slots  READY`)."""
    for line in p.cli("node", "ls").stdout.splitlines():
        words = line.split()
        if words and words[0] == name:
            return words[-1]
    return ""


# Its return (a new Ray node, the same perdure node, used by the next job) is the long half:
# ~25 s more, in `make test-ray`.
# ~35 s and more each: make test-ray (the default suite keeps Ray's failure table, warm
# relaunch and DDP tests)
@pytest.mark.parametrize("comes_back", [pytest.param(False, marks=pytest.mark.ray_long),
                                        pytest.param(True, marks=pytest.mark.ray_long)])
@pytest.mark.timeout(420)
def test_host_b_dies_replicas_move_to_a_and_b_comes_back(ray_perdure: RayPerdure,
                                                         local_sha: str, comes_back: bool) -> None:
    p = ray_perdure
    controller = p.popen("controller")  # nodes discovered from Ray: a (4 slots), b (2)
    try:
        p.cli("submit", str(ddp_spec(p, "moved", step_time=0.1)))
        d = p.wait("moved", lambda d: d["state"] == "RUNNING", timeout=90)
        on_b = sorted(x["name"] for x in d["replicas"] if x["node"] == "b")
        assert on_b == ["worker-0", "worker-1"], d["replicas"]
        wait_step(p, "moved", 15)
        killed_at = time.time()
        assert p.hosts.kill("b") > 0
        d = wait_state(p, "moved", ("SUCCEEDED", "FAILED"), timeout=240)
        assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-15:])
        assert final_sha(p, "moved") == local_sha
        assert all(x["node"] == "a" for x in d["replicas"]), d["replicas"]
        # Either the host's death is seen first (its replicas exit "node lost"), or the
        # survivors' lost-peer exits (gloo notices in ms; the death takes seconds) start the
        # group restart and the node's loss, seen while it stops, gives that restart back.
        lost = next((e for e in d["events"] if "node lost" in e["message"]
                     or "node b was lost" in e["message"]), None)
        assert lost is not None, [e["message"] for e in d["events"]]
        assert lost["time"] - killed_at < 8, "the host's death took too long to notice"
        assert all(x["restarts"] == 0 for x in d["replicas"]), (
            [(x["name"], x["restarts"]) for x in d["replicas"]],
            "\n".join(e["message"] for e in d["events"] if e["time"] > killed_at - 1))
        # the saves its replicas reported reached the controller: no "starts over" claim
        assert not [e for e in d["events"] if e["kind"] == "starts-over"], d["events"]
        if not comes_back:
            return
        # b comes back as a new Ray node with the same resource: the same perdure node. The
        # controller sees it within a poll or two (slower on a loaded machine): wait for that
        # before placing a job that should use it (placing first put all four on a: a flake).
        p.hosts.start("b")
        deadline = time.time() + 90
        while node_state(p, "b") != "READY":
            assert time.time() < deadline, p.cli("node", "ls").stdout
            time.sleep(0.5)
        p.cli("submit", str(p.spec("after", replicas=4, command=["python", "-c", "pass"])))
        d = wait_state(p, "after", ("SUCCEEDED", "FAILED"), timeout=120)
        assert d["state"] == "SUCCEEDED", d["events"]
        assert "b" in [x["node"] for x in d["replicas"]]
        listed = p.cli("node", "ls").stdout.split()  # the nodes the controller discovered
        assert listed[:4] == ["a", "4", "slots", "READY"] and listed[4:8] == [
            "b", "2", "slots", "READY"], listed
    finally:
        out = stop_controller(controller)
    assert "node b restored" in out or not comes_back, out[-3000:]


@pytest.mark.ray_long
@pytest.mark.timeout(420)
def test_controller_sigkill_reattaches_without_duplicates(ray_perdure: RayPerdure,
                                                         local_sha: str) -> None:
    p = ray_perdure
    cluster = str(p.ray_cluster({"a": 2, "b": 2}))
    controller = p.popen("controller", "--cluster", cluster)
    p.cli("submit", str(ddp_spec(p, "kept", step_time=0.1)), "--cluster", cluster)
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
    assert final_sha(p, "kept") == local_sha
    no_launch_actors_soon(p)  # no orphans


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
    no_launch_actors_soon(p)


def no_launch_actors_soon(p: RayPerdure, timeout: float = 45) -> None:
    """No launch actor is left: each launch's is released, and the spare launch actors of the
    SIGKILLed controller leave by themselves (their namespace lock went with it)."""
    deadline = time.monotonic() + timeout
    while left := [n for n in named_actors(p) if n.startswith(("launch:", "spare:"))]:
        assert time.monotonic() < deadline, left
        time.sleep(1)
