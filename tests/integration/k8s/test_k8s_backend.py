"""`backend: kubernetes` on the real test cluster: the DDP example on two worker hosts, a
killed rank restarted in its pod, as a user drives it from this machine."""

from __future__ import annotations

import json
import time

import pytest
from k8stest import K8sPerdure, ddp_spec
from tests.helpers.clusterjobs import STEP, describe, final_sha, wait_state, wait_step
from tests.helpers.stopping import stop_controller

TWO = {"a": 2, "b": 2}


def uids(p: K8sPerdure) -> dict[str, str]:
    return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in p.pods()
            if not pod["metadata"].get("deletionTimestamp")}


@pytest.mark.k8s_long
@pytest.mark.timeout(600)
def test_ddp_on_two_hosts_ends_with_the_local_backends_weights(
        k8s_perdure: K8sPerdure, local_sha: str) -> None:
    p = k8s_perdure
    r = p.cli("run", str(ddp_spec(p, "plain")), "--cluster", str(p.k8s_cluster(TWO)),
              check=False, timeout=420)
    assert "SUCCEEDED" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    d = describe(p, "plain")
    assert sorted(x["node"] for x in d["replicas"]) == ["a", "a", "b", "b"], d["replicas"]
    assert final_sha(p, "plain") == local_sha
    on_b = next(x["name"] for x in d["replicas"] if x["node"] == "b")
    out = p.cli("logs", "plain", "--replica", on_b, "--stdout").stdout
    assert "step " in out, out[-2000:]  # a log from host b, pushed by its agent


def replica_pid(p: K8sPerdure, job: str, replica: str) -> tuple[str, int, str]:
    """(pod, pid in the pod, launch id) of `replica`'s running process, from the controller's
    copy of its launch records."""
    for record in sorted(p.state.glob(f"launches/{job}-*/launch.json"),
                         key=lambda f: f.stat().st_mtime, reverse=True):
        launch = json.loads(record.read_text())
        status = record.with_name("status.json")
        if launch.get("replica") == replica and status.exists() and not record.with_name(
                "exit.json").exists():
            return launch["pod"], int(json.loads(status.read_text())["pid"]), launch["launch_id"]
    raise AssertionError(f"{replica} of {job} runs nowhere")


def steps_logged(p: K8sPerdure, job: str) -> int:
    return sum(len(STEP.findall(log.read_text()))
               for log in p.state.glob(f"logs/{job}-*/attempt-*/worker-*.out"))


def wait_more_steps(p: K8sPerdure, job: str, than: int, timeout: float = 120) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if steps_logged(p, job) > than:
            return time.monotonic()
        time.sleep(0.05)
    raise AssertionError(f"{job}: no step logged after {than}")


@pytest.mark.k8s_long
@pytest.mark.timeout(600)
def test_a_killed_rank_restarts_in_its_pod_no_pod_made_again(
        k8s_perdure: K8sPerdure, local_sha: str) -> None:
    p = k8s_perdure
    cluster = str(p.k8s_cluster(TWO))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(ddp_spec(p, "killed", step_time=0.1)), "--cluster", cluster)
        wait_state(p, "killed", ("RUNNING",), timeout=180)
        wait_step(p, "killed", 15, timeout=180)
        before = uids(p)
        assert len(before) == 2, before
        pod, pid, _ = replica_pid(p, "killed", "worker-3")
        t0 = time.monotonic()
        p.k8s.kubectl("exec", pod, "--", "kill", "-9", str(pid))
        p.wait("killed", lambda d: any(x["restarts"] for x in d["replicas"]), timeout=60)
        took = wait_more_steps(p, "killed", steps_logged(p, "killed")) - t0
        print(f"killed rank: next step logged {took:.2f} s after the SIGKILL")
        assert uids(p) == before  # the same pods throughout: the restart was in place
        d = wait_state(p, "killed", ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=400)
        assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-15:])
        assert final_sha(p, "killed") == local_sha
        made = [e for e in (p.state / "kubernetes" / "kubernetes.log").read_text().splitlines()
                if " made for node " in e]
        assert len(made) == 2, made  # no pod made again for the restart
    finally:
        stop_controller(controller)


THREE = {"a": 2, "b": 2, "c": 2}


@pytest.mark.k8s_long
@pytest.mark.timeout(600)
def test_host_b_dies_its_replicas_go_on_on_c_and_end_bit_identical(
        k8s_perdure: K8sPerdure, local_sha: str) -> None:
    p = k8s_perdure
    cluster = str(p.k8s_cluster(THREE))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(ddp_spec(p, "moved", step_time=0.1)), "--cluster", cluster)
        d = wait_state(p, "moved", ("RUNNING",), timeout=180)
        assert sorted(x["node"] for x in d["replicas"]) == ["a", "a", "b", "b"], d["replicas"]
        wait_step(p, "moved", 15, timeout=180)
        killed_at, t0 = time.time(), time.monotonic()
        p.k8s.kill("b")
        p.wait("moved", lambda d: sorted(x["node"] for x in d["replicas"]) == [
            "a", "a", "c", "c"], timeout=60)
        took = wait_more_steps(p, "moved", steps_logged(p, "moved")) - t0
        print(f"host lost: next step logged {took:.2f} s after host b died")
        d = wait_state(p, "moved", ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=400)
        assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-15:])
        assert final_sha(p, "moved") == local_sha
        lost = next((e for e in d["events"] if "node lost" in e["message"]
                     or "node b was lost" in e["message"]), None)
        assert lost is not None, [e["message"] for e in d["events"]]
        assert lost["time"] - killed_at < 5, "the host's death took too long to notice"
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
    finally:
        stop_controller(controller)


def evict(p: K8sPerdure, pod: str) -> None:
    """The eviction API, as `kubectl drain` and the cluster autoscaler use it."""
    body = json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": pod, "namespace": "default"}})
    p.k8s.kubectl("create", "--raw", f"/api/v1/namespaces/default/pods/{pod}/eviction",
                  "-f", "-", input=body)


@pytest.mark.k8s_long
@pytest.mark.timeout(600)
def test_an_evicted_pod_suspends_the_job_which_resumes_in_new_pods_bit_identical(
        k8s_perdure: K8sPerdure, local_sha: str) -> None:
    p = k8s_perdure
    cluster = str(p.k8s_cluster(TWO))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(ddp_spec(p, "evicted", step_time=0.1, grace=20)), "--cluster",
              cluster)
        wait_state(p, "evicted", ("RUNNING",), timeout=180)
        wait_step(p, "evicted", 15, timeout=180)
        first = uids(p)
        evict(p, sorted(first)[0])
        d = wait_state(p, "evicted", ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=400)
        assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-20:])
        messages = [e["message"] for e in d["events"]]
        assert any(m.startswith("SUSPENDED") for m in messages), messages
        assert d["attempt"] > 1, d["attempt"]
        assert final_sha(p, "evicted") == local_sha
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
        made = [e for e in (p.state / "kubernetes" / "kubernetes.log").read_text().splitlines()
                if " made for node " in e]
        assert len(made) == 4, made  # new pods for the attempt after the suspension
    finally:
        stop_controller(controller)


COUNT = ("import os, time; print('start', os.environ['PERDURE_RESTART_COUNT'], flush=True); "
         "[print(i, flush=True) or time.sleep(1) for i in range(25)]")


@pytest.mark.k8s_long
@pytest.mark.timeout(300)
def test_a_killed_controller_reattaches_to_its_pods_by_label(k8s_perdure: K8sPerdure) -> None:
    p = k8s_perdure
    cluster = str(p.k8s_cluster({"a": 1, "b": 1}))
    first = p.popen("controller", "--cluster", cluster)
    p.cli("submit", str(p.spec("again", replicas=2, command=["python", "-c", COUNT])),
          "--cluster", cluster)
    p.wait("again", lambda d: d["state"] == "RUNNING", timeout=120)
    time.sleep(3)
    pods = uids(p)
    first.kill()  # the wrapper execs: this is the controller itself
    first.wait(timeout=30)
    second = p.popen("controller", "--cluster", cluster)
    try:
        d = wait_state(p, "again", ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=120)
        assert d["state"] == "SUCCEEDED", d["events"]
        assert any("re-attached to 2 replicas" in e["message"] for e in d["events"]), d
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
        for log in p.state.glob("logs/again-*/attempt-1/worker-*.out"):
            lines = log.read_text().splitlines()[1:]  # after perdure's header
            assert lines == ["start 0", *map(str, range(25))], lines  # whole, once
        made = (p.state / "kubernetes" / "kubernetes.log").read_text().count(" made for node ")
        assert made == 2 and len(pods) == 2, (made, pods)  # the same pods throughout
    finally:
        stop_controller(second)
