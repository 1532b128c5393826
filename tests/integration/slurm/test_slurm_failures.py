"""Hosts that die, preemptions and time limits under a running job on Slurm: it ends
bit-identical to an uninterrupted run on the local backend."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
from slurmtest import SlurmPerdure, ddp_spec
from tests.helpers.clusterjobs import final_sha, wait_state, wait_step
from tests.helpers.stopping import stop_controller

THREE = {"a": 2, "b": 2, "c": 2}  # a job of 4 on a and b; c is free for a replacement


def done(p: SlurmPerdure, job: str, timeout: float) -> dict[str, Any]:
    return wait_state(p, job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout)


def stop(controller: subprocess.Popen[str]) -> str:
    return stop_controller(controller)


@pytest.mark.slurm_long
@pytest.mark.timeout(600)
def test_host_b_dies_the_job_goes_on_with_a_replacement_and_ends_bit_identical(
        slurm_perdure: SlurmPerdure, local_sha: str) -> None:
    p = slurm_perdure
    cluster = str(p.slurm_cluster(THREE))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(ddp_spec(p, "moved", step_time=0.2)), "--cluster", cluster)
        d = p.wait("moved", lambda d: d["state"] == "RUNNING", timeout=120)
        assert sorted(x["node"] for x in d["replicas"]) == ["a", "a", "b", "b"], d["replicas"]
        wait_step(p, "moved", 15, timeout=120)
        killed_at = time.time()
        p.slurm.kill("b")
        d = done(p, "moved", timeout=300)
        assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-15:])
        assert final_sha(p, "moved") == local_sha
        assert sorted(x["node"] for x in d["replicas"]) == ["a", "a", "c", "c"], d["replicas"]
        lost = next(e for e in d["events"] if "node lost" in e["message"]
                    or "node b was lost" in e["message"])
        assert lost["time"] - killed_at < 5, "the host's death took too long to notice"
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
        # the saves its replicas reported reached the controller: no "starts over" claim
        assert not [e for e in d["events"] if e["kind"] == "starts-over"], d["events"]
    finally:
        stop(controller)


@pytest.mark.slurm_long
@pytest.mark.timeout(600)
def test_preempted_by_the_urgent_partition_suspends_and_resumes_bit_identical(
        slurm_perdure: SlurmPerdure, local_sha: str) -> None:
    p = slurm_perdure
    cluster = str(p.slurm_cluster(THREE))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(ddp_spec(p, "bumped", step_time=0.2, grace=20)), "--cluster",
              cluster)
        p.wait("bumped", lambda d: d["state"] == "RUNNING", timeout=120)
        wait_step(p, "bumped", 15, timeout=120)
        # someone's higher-priority job needs a, b and c: Slurm preempts ours (GraceTime)
        p.slurm.run("sbatch", "-p", "urgent", "-N", "3", "-c", "2", "-o", "/dev/null",
                    "--wrap", "sleep 15")
        d = p.wait("bumped", lambda d: d["state"] in ("SUSPENDED", "QUEUED", "FAILED")
                   or d["attempt"] > 1, timeout=120)
        d = done(p, "bumped", timeout=300)
        assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-20:])
        messages = [e["message"] for e in d["events"]]
        assert any(m.startswith("SUSPENDED") for m in messages), messages
        # the next attempt's allocation waited behind the urgent job: QUEUED, Slurm's reason
        assert any(m.startswith("QUEUED: waiting in the backend's queue: Slurm: ")
                   for m in messages), messages
        assert final_sha(p, "bumped") == local_sha
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
    finally:
        stop(controller)


@pytest.mark.slurm_long
@pytest.mark.timeout(600)
def test_time_limit_warning_saves_suspends_and_resumes_in_a_new_allocation(
        slurm_perdure: SlurmPerdure, local_sha: str) -> None:
    p = slurm_perdure
    # a 1-minute allocation, warned 20 + 10 s before its end (Slurm may warn up to a minute
    # early): the job saves, suspends, and goes on in a new allocation
    cluster = str(p.slurm_cluster(THREE, time_limit="1"))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(ddp_spec(p, "timed", step_time=0.6, grace=20)), "--cluster",
              cluster)
        d = done(p, "timed", timeout=500)
        assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-20:])
        messages = [e["message"] for e in d["events"]]
        assert any(m.startswith("SUSPENDED") for m in messages), messages
        assert final_sha(p, "timed") == local_sha
    finally:
        stop(controller)


COUNT = ("import os, time; print('start', os.environ['PERDURE_RESTART_COUNT'], flush=True); "
         "[print(i, flush=True) or time.sleep(1) for i in range(25)]")


@pytest.mark.slurm_long
@pytest.mark.timeout(300)
def test_a_killed_controller_reattaches_to_its_allocation_and_steps(
        slurm_perdure: SlurmPerdure) -> None:
    p = slurm_perdure
    cluster = str(p.slurm_cluster({"a": 1, "b": 1}))
    first = p.popen("controller", "--cluster", cluster)
    p.cli("submit", str(p.spec("again", replicas=2, command=["python", "-c", COUNT])),
          "--cluster", cluster)
    p.wait("again", lambda d: d["state"] == "RUNNING", timeout=90)
    time.sleep(3)
    first.kill()  # the wrapper execs: this is the controller itself
    first.wait(timeout=30)
    second = p.popen("controller", "--cluster", cluster)
    try:
        d = done(p, "again", timeout=120)
        assert d["state"] == "SUCCEEDED", d["events"]
        assert any("re-attached to 2 replicas" in e["message"] for e in d["events"]), d
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
        for log in p.state.glob("logs/again-*/attempt-1/worker-*.out"):
            lines = log.read_text().splitlines()[1:]  # after perdure's header
            assert lines == ["start 0", *map(str, range(25))], lines  # whole, once
        jobs = p.slurm.run("squeue", "-h", "-t", "all", "-o", "%j %T").split("\n")
        assert sum("again" in j for j in jobs) == 1, jobs  # the same allocation throughout
    finally:
        stop(second)


# exits 75 after its save, as perdure.runtime does ("saved, resume me"): an exit 0 under a
# notice is a primary that finished, and the job would succeed without resuming
SLOW_SAVE = ("import os, signal, sys, time\n"
             "def save(*_):\n"
             "    print('notice', flush=True); time.sleep(14); print('saved', flush=True)\n"
             "    sys.exit(75)\n"
             "signal.signal(signal.SIGTERM, save)\n"
             "print('attempt', os.environ['PERDURE_ATTEMPT'], flush=True)\n"
             "time.sleep(600 if os.environ['PERDURE_ATTEMPT'] == '1' else 1)\n")


@pytest.mark.slurm_long
@pytest.mark.timeout(300)
def test_a_preempted_replica_gets_the_jobs_grace_to_save_not_the_supervisors_default(
        slurm_perdure: SlurmPerdure) -> None:
    """Slurm's SIGTERM reaches the supervisor too: its own stop must not cut a 14 s save
    short at its 10 s default when the job's grace is 20 s."""
    p = slurm_perdure
    cluster = str(p.slurm_cluster({"a": 2}))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(p.spec("slow", replicas=2, command=["python", "-c", SLOW_SAVE],
                                   preemption={"grace_seconds": 20})), "--cluster", cluster)
        p.wait("slow", lambda d: d["state"] == "RUNNING", timeout=90)
        time.sleep(1)
        p.slurm.run("sbatch", "-p", "urgent", "-N", "3", "-c", "2", "-o", "/dev/null",
                    "--wrap", "sleep 5")
        d = done(p, "slow", timeout=200)
        assert d["state"] == "SUCCEEDED", d["events"]
        assert any(e["message"].startswith("SUSPENDED") for e in d["events"]), d["events"]
        log = next(p.state.glob("logs/slow-*/attempt-1/worker-0.out")).read_text()
        assert "saved" in log, log
    finally:
        stop(controller)


@pytest.mark.slurm_long
@pytest.mark.timeout(300)
def test_an_elastic_job_shrinks_when_its_host_dies(slurm_perdure: SlurmPerdure) -> None:
    p = slurm_perdure
    cluster = str(p.slurm_cluster({"a": 1, "b": 1}))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        spec = p.spec("shrinks", replicas=2, command=["python", "-c", "import time; "
                                                       "time.sleep(600)"],
                      pool={"min_replicas": 1}, elastic={"mode": "resize"})
        p.cli("submit", str(spec), "--cluster", cluster)
        d = p.wait("shrinks", lambda d: d["state"] == "RUNNING", timeout=90)
        on_a = next(x["name"] for x in d["replicas"] if x["node"] == "a")
        killed = time.time()
        p.slurm.kill("b")
        d = p.wait("shrinks", lambda d: bool(d["elastic"]), timeout=30)
        assert "shrink 2 -> 1" in d["elastic"][0]["what"], d["elastic"]
        assert d["elastic"][0]["time"] - killed < 5, "the host's death took too long to notice"
        time.sleep(3)
        d = p.describe("shrinks")
        assert d["state"] == "RUNNING", d["events"]
        survivor = next(x for x in d["replicas"] if x["name"] == on_a)
        assert survivor["state"] == "RUNNING" and survivor["restarts"] == 0, d["replicas"]
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
        p.cli("cancel", "shrinks")
    finally:
        stop(controller)
