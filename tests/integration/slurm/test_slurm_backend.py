"""A job on a real Slurm cluster, driven from its login node as a user does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from slurmtest import SlurmPerdure
from tests.helpers.stopping import stop_controller

from perdure.backends.slurm.allocs import name_prefix

SPREAD = {"a": 2, "b": 2}
HELLO = ("import os, socket, sys, time; print('hello from', socket.gethostname(), "
         "os.environ['RANK']); print('to stderr', file=sys.stderr); sys.stdout.flush(); "
         "first = os.environ['RANK'] == '3' and os.environ['PERDURE_RESTART_COUNT'] == '0'; "
         "time.sleep(0 if first else 5); sys.exit(3 if first else 0)")


def slurm_jobs(p: SlurmPerdure) -> list[list[str]]:
    """This test's allocations (Slurm still lists an earlier test's that ended a moment ago)."""
    out = p.slurm.run("squeue", "-h", "-t", "all", "-o", "%i %j %T %N")
    ours = name_prefix(os.path.realpath(p.state))
    return [row for row in map(str.split, out.splitlines()) if row[1].startswith(ours)]


@pytest.mark.timeout(240)
def test_spread_over_a_and_b_logs_from_b_restart_in_the_same_allocation(
        slurm_perdure: SlurmPerdure) -> None:
    p = slurm_perdure
    spec = p.spec("hello", replicas=4, command=["python", "-c", HELLO],
                  restart={"scope": "replica"})
    r = p.cli("run", str(spec), "--cluster", str(p.slurm_cluster(SPREAD)), timeout=180)
    assert "SUCCEEDED" in r.stdout, r.stdout + r.stderr
    d = p.describe("hello")
    assert sorted(x["node"] for x in d["replicas"]) == ["a", "a", "b", "b"], d["replicas"]
    # worker-3 exited 3 once and was restarted in place, in the allocation its attempt holds
    w3 = next(x for x in d["replicas"] if x["name"] == "worker-3")
    assert w3["restarts"] == 1, d["events"]
    jobs = slurm_jobs(p)
    assert len(jobs) == 1 and jobs[0][1].endswith("hello-" + d["id"].split("-")[-1] + ".1"), jobs
    assert jobs[0][2] in ("CANCELLED", "COMPLETING"), jobs  # given back once the job ended
    # logs of replicas that ran on b, read on the login node (the agent pushed them)
    on_b = [x["name"] for x in d["replicas"] if x["node"] == "b"]
    for name in on_b:
        out = p.cli("logs", "hello", "--replica", name, "--stdout").stdout
        assert "hello from b" in out, out
    err = p.cli("logs", "hello", "--replica", "worker-3").stdout
    assert "to stderr" in err, err


@pytest.mark.timeout(240)
def test_cancel_while_running_stops_every_replica_and_gives_the_allocation_back(
        slurm_perdure: SlurmPerdure) -> None:
    p = slurm_perdure
    spec = p.spec("sleepy", replicas=2, command=["python", "-c",
                                                 "import time; print('up', flush=True); "
                                                 "time.sleep(600)"])
    cluster = str(p.slurm_cluster(SPREAD))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(spec), "--cluster", cluster)
        p.wait("sleepy", lambda d: d["state"] == "RUNNING", timeout=90)
        started = time.time()
        p.cli("cancel", "sleepy")
        d = p.wait("sleepy", lambda d: d["state"] == "CANCELLED", timeout=60)
        assert time.time() - started < 30, d["events"]
        deadline = time.time() + 30
        while time.time() < deadline and any(j[2] in ("RUNNING", "PENDING")
                                              for j in slurm_jobs(p)):
            time.sleep(0.3)
        assert not any(j[2] in ("RUNNING", "PENDING") for j in slurm_jobs(p)), slurm_jobs(p)
    finally:
        stop_controller(controller)


@pytest.mark.slurm_long
@pytest.mark.timeout(240)
def test_scancel_from_outside_is_a_cancel(slurm_perdure: SlurmPerdure) -> None:
    p = slurm_perdure
    spec = p.spec("outside", replicas=2, command=["python", "-c",
                                                  "import time; time.sleep(600)"])
    cluster = str(p.slurm_cluster(SPREAD))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(spec), "--cluster", cluster)
        p.wait("outside", lambda d: d["state"] == "RUNNING", timeout=90)
        (slurm_id,) = [j[0] for j in slurm_jobs(p) if j[2] == "RUNNING"]
        p.slurm.run("scancel", slurm_id)
        d = p.wait("outside", lambda d: d["state"] in ("CANCELLED", "FAILED"), timeout=60)
        assert d["state"] == "CANCELLED", d["events"]
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
        assert not any("failed: its replicas are lost" in e["message"]
                       for e in d["events"]), d["events"]
    finally:
        stop_controller(controller)


@pytest.mark.slurm_long
def test_queue_wait_is_queued_with_slurm_reason(slurm_perdure: SlurmPerdure) -> None:
    """A node held by someone else's job: the allocation waits in Slurm's queue, the job is
    QUEUED with Slurm's reason (Resources or Priority) in ls and describe, and it runs once
    the node is free."""
    p = slurm_perdure
    blocker = p.slurm.run("sbatch", "--parsable", "-w", "a", "-c", "2", "-o", "/dev/null", "--wrap",
                          "sleep 600").strip()
    spec = p.spec("waiting", replicas=1, command=["python", "-c", "print('ran')"])
    cluster = str(p.slurm_cluster({"a": 2}))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(spec), "--cluster", cluster)
        # Resources, or Priority once the blocking job has been scheduled ahead of it: both
        # are Slurm's own words for a queue wait
        d = p.wait("waiting", lambda d: d["state"] == "QUEUED" and bool(d["queue_reason"]),
                   timeout=60)
        assert d["queue_reason"].startswith(("Slurm: Resources", "Slurm: Priority")), d
        assert "Slurm job" in d["queue_reason"], d
        assert all(x["state"] == "STARTING" for x in d["replicas"]), d["replicas"]
        assert any(e["message"].startswith("QUEUED: waiting in the backend's queue: Slurm: ")
                   for e in d["events"]), d["events"]
        # Slurm may turn Resources into Priority between two reads: same job, either word
        slurm_job = d["queue_reason"].rsplit("(", 1)[1]
        said = r"Slurm: (Resources|Priority) \(" + re.escape(slurm_job)
        row = next(r for r in json.loads(p.cli("ls", "--json").stdout) if r["id"] == d["id"])
        assert row["state"] == "QUEUED" and re.fullmatch(said, row["queue_reason"]), row
        assert re.search(r"QUEUED \(" + said + r"\)", p.cli("ls").stdout)
        assert "Waiting in the backend's queue: Slurm: " in p.cli("describe", "waiting").stdout
        p.slurm.run("scancel", blocker)
        d = p.wait("waiting", lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=90)
        assert d["state"] == "SUCCEEDED", d["events"]
        messages = [e["message"] for e in d["events"]]
        assert any(m.startswith("PENDING: Slurm started Slurm job") for m in messages), messages
        assert d["goodput"]["queued_seconds"] > 0, d["goodput"]
    finally:
        stop_controller(controller)


# ~17 s with teardown: in make test-slurm, to keep the default suite within its time.
@pytest.mark.slurm_long
@pytest.mark.timeout(240)
def test_the_log_cap_holds_on_the_node_and_on_the_login_node(
        slurm_perdure: SlurmPerdure) -> None:
    """$PERDURE_LOG_MAX_MB of the controller reaches the replica's supervisor on its node:
    a replica that prints 6 MiB leaves a log of at most the cap, its tail kept."""
    p = slurm_perdure
    loud = ("import sys\nfor i in range(6 * 1024):\n    sys.stdout.write(f'line {i:06d} ' + "
            "'x' * 1000 + '\\n')\nprint('the end', flush=True)")
    spec = p.spec("loud", replicas=1, command=["python", "-c", loud])
    cluster = str(p.slurm_cluster({"b": 2}))
    r = subprocess.run([*p.base(), "run", str(spec), "--cluster", cluster], capture_output=True,
                       text=True, timeout=180, env={**p.slurm.env, "PERDURE_LOG_MAX_MB": "1"})
    assert "SUCCEEDED" in r.stdout, r.stdout + r.stderr
    out = p.cli("logs", "loud", "--replica", "worker-0", "--stdout").stdout
    assert "the end" in out and "earlier bytes of this log were dropped" in out, out[:300]
    assert len(out.encode()) <= (1 << 20) + 4096, len(out)
    (record,) = [json.loads(f.read_text()) for f in p.state.glob("launches/loud-*/launch.json")]
    assert record["log_max_bytes"] == 1 << 20, record  # what the node's supervisor applies
    on_node = Path(tempfile.gettempdir(), "perdure-slurm", f"{record['slurm_job']}-b",
                   "launches", record["launch_id"], "stdout.log")
    if on_node.exists():  # the hosts share this machine's /tmp (a real node's is its own)
        assert on_node.stat().st_size <= (1 << 20) + 4096, on_node.stat().st_size
