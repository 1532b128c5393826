"""Node health on Slurm (issue 38): a quarantined host is excluded from later allocations
(`--exclude`), its replicas go to the held spare, and with `slurm.drain_bad_nodes` it is
drained in Slurm with the reason; a host Slurm drains has its replicas moved before it is
taken, with Slurm's reason in the job's events."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from slurmtest import SlurmPerdure
from tests.helpers.stopping import stop_controller

THREE = {"a": 2, "b": 2, "c": 2}
WAIT = ("import os, signal, time\n"
        "bad = os.environ['PERDURE_NODE'] == 'b' and os.environ['PERDURE_REPLICA'] == '{r}'\n"
        "time.sleep(2)\n"
        "if bad:\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
        "while not os.path.exists({flag!r}):\n    time.sleep(0.2)")


def with_health(p: SlurmPerdure, **slurm: Any) -> str:
    path = p.slurm_cluster(THREE, **slurm)
    data = yaml.safe_load(path.read_text())
    data["health"] = {"max_node_failures": 1}
    path.write_text(yaml.safe_dump(data))
    return str(path)


def resume(p: SlurmPerdure, node: str) -> None:
    with contextlib.suppress(Exception):
        p.slurm.run("scontrol", "update", f"nodename={node}", "state=resume")


def finish(p: SlurmPerdure, flag: Path, job: str) -> None:
    """Let the replicas end: the job succeeds."""
    flag.touch()
    d = p.wait(job, lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=60)
    assert d["state"] == "SUCCEEDED", d["events"][-10:]


def node_state(p: SlurmPerdure, node: str) -> tuple[str, str]:
    line = p.slurm.run("sinfo", "-h", "-N", "-n", node, "-o", "%t|%E").splitlines()[0]
    state, reason = line.split("|", 1)
    return state, reason


@pytest.mark.slurm_long
@pytest.mark.timeout(400)
def test_a_quarantined_host_is_drained_excluded_and_replaced_by_the_spare(
        slurm_perdure: SlurmPerdure) -> None:
    p = slurm_perdure
    flag = p.root / "finish"
    spec = p.spec("fenced", replicas=4, command=["python", "-c", WAIT.format(
        r="worker-2", flag=str(flag))], pool={"spares": 1},
        restart={"transient_exit_codes": []})  # a restart in place, not a job retry
    cluster = with_health(p, drain_bad_nodes=True)
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(spec), "--cluster", cluster)
        d = p.wait("fenced", lambda d: d["state"] == "RUNNING" and sorted(
            x["node"] for x in d["replicas"]) == ["a", "a", "c", "c"], timeout=240)
        messages = [e["message"] for e in d["events"]]
        assert any(m.startswith("spare node c took") for m in messages), messages
        listed = p.cli("node", "ls").stdout
        b = next(x for x in listed.splitlines() if x.startswith("b "))
        assert "QUARANTINED  1 failure within 604800s: SIGSEGV of worker-2" in b, listed
        state, reason = node_state(p, "b")
        assert state in ("drng", "drain") and reason.startswith(  # draining: ours still ends
            "perdure quarantine: 1 failure within 604800s: SIGSEGV of worker-2"), (state, reason)
        finish(p, flag, "fenced")
        # a later allocation, of another job, leaves b out
        quick = p.spec("quick", replicas=1, command=["python", "-c", "import time; "
                                                     "time.sleep(5)"])
        p.cli("submit", str(quick), "--cluster", cluster)
        d = p.wait("quick", lambda d: d["state"] in ("RUNNING", "SUCCEEDED"), timeout=120)
        assert d["replicas"][0]["node"] != "b"
        shown = p.slurm.run("scontrol", "show", "job", "-o", _slurm_job(p, ".quick-"))
        assert "ExcNodeList=b " in shown, shown
    finally:
        stop_controller(controller)
        resume(p, "b")


def _slurm_job(p: SlurmPerdure, part: str) -> str:
    return _slurm_jobs(p, part)[0]


def _slurm_jobs(p: SlurmPerdure, part: str) -> list[str]:
    lines = p.slurm.run("squeue", "-h", "-t", "all", "-o", "%i %j").splitlines()
    return [x.split()[0] for x in lines if part in x]


@pytest.mark.slurm_long
@pytest.mark.timeout(400)
def test_a_host_slurm_drains_has_its_replicas_moved_first(slurm_perdure: SlurmPerdure) -> None:
    p = slurm_perdure
    flag = p.root / "finish"
    spec = p.spec("drained", replicas=2, command=["python", "-c", WAIT.format(
        r="none", flag=str(flag))], pool={"slots": 2})
    cluster = str(p.slurm_cluster(THREE))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(spec), "--cluster", cluster)
        d = p.wait("drained", lambda d: d["state"] == "RUNNING", timeout=120)
        on = sorted(x["node"] for x in d["replicas"])
        assert on == ["a", "b"], d["replicas"]
        p.slurm.run("scontrol", "update", "nodename=b", "state=drain", "reason=fan failing")
        d = p.wait("drained", lambda d: d["state"] == "RUNNING" and sorted(
            x["node"] for x in d["replicas"]) == ["a", "c"], timeout=120)
        messages = [e["message"] for e in d["events"]]
        assert any(m == "move worker-1 off node b (Slurm drains it: fan failing, no restart)"
                   for m in messages), messages
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
        finish(p, flag, "drained")
    finally:
        stop_controller(controller)
        resume(p, "b")


# Each replica says where it ran; the primary ends once worker-1 has run (on a good node).
RAN = ("import os, pathlib, time\n"
       "ran = pathlib.Path({ran!r})\n"
       "(ran / os.environ['PERDURE_REPLICA']).write_text(os.environ['PERDURE_NODE'])\n"
       "while not (ran / 'worker-1').exists():\n    time.sleep(0.2)\n"
       "time.sleep(1)")
CHECK = """import os, pathlib, sys
node, attempt = os.environ["PERDURE_NODE"], os.environ["PERDURE_ATTEMPT"]
pathlib.Path({marks!r}, f"{{node}}.{{attempt}}").touch()
print("PASS cpu: matmul fine")
if node == "b":
    print("FAIL gpu 0 ecc: 3 uncorrected ECC errors since the driver loaded")
    sys.exit(1)
"""


@pytest.mark.slurm_long
@pytest.mark.timeout(400)
def test_a_host_failing_its_preflight_gets_no_replica(slurm_perdure: SlurmPerdure) -> None:
    p = slurm_perdure
    marks = p.root / "checked"
    marks.mkdir()
    check = p.write("check.py", CHECK.format(marks=str(marks)))
    ran = p.root / "ran"
    ran.mkdir()
    spec = p.spec("pre", replicas=2, command=["python", "-c", RAN.format(ran=str(ran))],
                  pool={"slots": 2})
    path = p.slurm_cluster(THREE)
    data = yaml.safe_load(path.read_text())
    data["health"] = {"preflight": ["python", str(check)], "timeout_seconds": 60}
    path.write_text(yaml.safe_dump(data))
    controller = p.popen("controller", "--cluster", str(path))
    try:
        p.cli("submit", str(spec), "--cluster", str(path))
        d = p.wait("pre", lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=240)
        assert d["state"] == "SUCCEEDED", d["events"][-10:]
        assert sorted(x["node"] for x in d["replicas"]) == ["a", "c"], d["replicas"]
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
        assert sorted(x.name for x in marks.iterdir()) == ["a.1", "b.1", "c.1"]
        assert {x.name: x.read_text() for x in ran.iterdir()} == {"worker-0": "a",
                                                                   "worker-1": "c"}
        why = (f"health check failed: `python {check}` exited 1: FAIL "
               "gpu 0 ecc: 3 uncorrected ECC errors since the driver loaded")
        messages = [e["message"] for e in d["events"]]
        assert "move worker-1 off node b (quarantined, no restart)" in messages, messages
        listed = p.cli("node", "ls").stdout
        b = next(x for x in listed.splitlines() if x.startswith("b "))
        assert b.endswith(f"QUARANTINED  {why}"), listed
        shown = [p.slurm.run("scontrol", "show", "job", "-o", x) for x in _slurm_jobs(p, ".pre-")]
        assert any("ExcNodeList=b " in x for x in shown), shown  # c's came after the fence
    finally:
        stop_controller(controller)
