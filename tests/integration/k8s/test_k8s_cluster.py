"""The Kubernetes test cluster itself: real kubelets run real pods from local images, and a
lost host is seen by the control plane as Kubernetes sees one."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from k8scluster import REPO, K8sCluster
from k8simages import TOOLS_IMAGE


def pod(name: str, node: str, script: str, restart: str = "Never") -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"test": "cluster"}},
        "spec": {"nodeName": node, "hostNetwork": True, "restartPolicy": restart,
                 "dnsPolicy": "Default", "terminationGracePeriodSeconds": 1,
                 "automountServiceAccountToken": False,
                 "containers": [{"name": "main", "image": TOOLS_IMAGE,
                                 "imagePullPolicy": "Never",
                                 "command": ["/bin/sh", "-c", script]}]}})


def phase(p: dict[str, Any]) -> str:
    return str(p.get("status", {}).get("phase"))


def node_ready(n: dict[str, Any]) -> str:
    return next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready")


@pytest.mark.k8s_long
def test_pods_run_on_each_worker_from_the_local_image(k8s: K8sCluster) -> None:
    """A pod on each worker runs busybox from the imported image, on the host's network
    (its hostname and address), and its log comes back through the API server."""
    for node in k8s.nodes:
        k8s.kubectl("apply", "-f", "-", input=pod(f"hello-{node}", node,
                                                  "hostname"))
    try:
        for node in k8s.nodes:
            k8s.wait_for(f"pod hello-{node}", lambda p: phase(p) == "Succeeded", timeout=60)
            out = k8s.kubectl("logs", f"hello-{node}")
            assert out.splitlines()[0] == node
    finally:
        k8s.kubectl("delete", "pod", "-l", "test=cluster", "--wait=false")


@pytest.mark.k8s_long
def test_a_killed_container_restarts_in_its_pod(k8s: K8sCluster) -> None:
    """restartPolicy Always: the kubelet restarts a container whose process was killed, in the
    same pod (Kubernetes' own in-place restart, the baseline perdure's is measured against)."""
    k8s.kubectl("apply", "-f", "-", input=pod("looper", "a", "sleep 3600 & wait $!", "Always"))
    try:
        p = k8s.wait_for("pod looper", lambda p: phase(p) == "Running", timeout=60)
        uid = p["metadata"]["uid"]
        t0 = time.monotonic()
        k8s.kubectl("exec", "looper", "--", "killall", "-9", "sleep")  # sh exits 137 with it
        p = k8s.wait_for("pod looper", lambda p: p["status"]["containerStatuses"][0]
                         ["restartCount"] == 1 and p["status"]["containerStatuses"][0]
                         .get("ready"), timeout=60, interval=0.1)
        print(f"container restarted in {time.monotonic() - t0:.1f} s")
        assert p["metadata"]["uid"] == uid
    finally:
        k8s.kubectl("delete", "pod", "looper", "--wait=false")


@pytest.mark.k8s_long
def test_a_lost_host_goes_not_ready_and_comes_back(k8s: K8sCluster) -> None:
    """Every process of host b SIGKILLed: node b turns NotReady after the controller-manager's
    grace period; b's kubelet and containerd started again: Ready again."""
    t0 = time.monotonic()
    k8s.kill("b")
    k8s.wait_for("node b", lambda n: node_ready(n) != "True", timeout=60, interval=0.2)
    print(f"node b NotReady {time.monotonic() - t0:.1f} s after its host died")
    t1 = time.monotonic()
    k8s.start("b")
    k8s.wait_for("node b", lambda n: node_ready(n) == "True", timeout=120, interval=0.2)
    print(f"node b Ready {time.monotonic() - t1:.1f} s after its kubelet started again")


def host_paths(*paths: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Read-only hostPath volumes and mounts of these host paths at the same place."""
    vols = [{"name": f"h{i}", "hostPath": {"path": p, "type": "Directory"}}
            for i, p in enumerate(paths)]
    mounts = [{"name": f"h{i}", "mountPath": p, "readOnly": True} for i, p in enumerate(paths)]
    return vols, mounts


@pytest.mark.k8s_long
def test_a_pod_runs_this_venvs_torch(k8s: K8sCluster) -> None:
    """The shape of perdure's agent pods in these tests: the small local image with this
    machine's interpreter, venv and sources mounted read-only (the venv is 5.7 GB: too big for
    an image imported on every run), on the host's network."""
    import torch

    venv = Path(sys.prefix)
    base = Path(os.path.realpath(sys.executable)).parents[1]
    paths = sorted({"/usr", "/lib", "/lib64", str(base), str(venv.resolve()), str(REPO)})
    vols, mounts = host_paths(*paths)
    spec = json.loads(pod("torch", "b", ""))
    spec["spec"]["volumes"] = vols
    main = spec["spec"]["containers"][0]
    main["volumeMounts"] = mounts
    main["command"] = [str(venv / "bin" / "python"), "-c",
                       "import socket, torch; print(socket.gethostname(), torch.__version__)"]
    main["env"] = [{"name": "PYTHONPATH", "value": str(REPO / "src")}]
    k8s.kubectl("apply", "-f", "-", input=json.dumps(spec))
    try:
        k8s.wait_for("pod torch", lambda p: phase(p) in ("Succeeded", "Failed"), timeout=120)
        out = k8s.kubectl("logs", "torch").split()
        assert out[:2] == ["b", torch.__version__], out
    finally:
        k8s.kubectl("delete", "pod", "torch", "--wait=false")


ALL_REDUCE = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=60))
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(os.uname().nodename, dist.get_rank(), int(t.item()), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.k8s_long
def test_ranks_in_pods_on_two_hosts_all_reduce_over_gloo(k8s: K8sCluster) -> None:
    """A rank in a pod on a and one on b (torchrun's environment by hand) meet at a's address
    and all-reduce over gloo across the bridge: what perdure's agent pods will run."""

    venv = Path(sys.prefix)
    base = Path(os.path.realpath(sys.executable)).parents[1]
    vols, mounts = host_paths(*sorted({"/usr", "/lib", "/lib64", str(base),
                                       str(venv.resolve()), str(REPO)}))
    for rank, node in enumerate(("a", "b")):
        spec = json.loads(pod(f"rank{rank}", node, ""))
        spec["spec"]["volumes"] = vols
        main = spec["spec"]["containers"][0]
        main["volumeMounts"] = mounts
        main["command"] = [str(venv / "bin" / "python"), "-c", ALL_REDUCE]
        main["env"] = [{"name": k, "value": v} for k, v in {
            "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": k8s.addresses["a"],
            "MASTER_PORT": "29511", "GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1",
        }.items()]
        k8s.kubectl("apply", "-f", "-", input=json.dumps(spec))
    try:
        for rank, node in enumerate(("a", "b")):
            p = k8s.wait_for(f"pod rank{rank}", lambda p: phase(p) in ("Succeeded", "Failed"),
                             timeout=180)
            log = k8s.kubectl("logs", f"rank{rank}")  # c10d's warnings, then the result
            assert phase(p) == "Succeeded", log
            assert log.splitlines()[-1].split() == [node, str(rank), "3"], log
    finally:
        k8s.kubectl("delete", "pod", "rank0", "rank1", "--wait=false")


@pytest.mark.k8s_long
def test_a_deleted_pod_is_made_again_by_its_job(k8s: K8sCluster) -> None:
    """A Job's pod deleted: the Job controller makes a new pod (after its failure backoff, 10 s
    at first), which the scheduler places and a kubelet starts: the Kubernetes way of a
    restart, timed for the comparison with perdure's in-place restart."""
    template = json.loads(pod("x", "a", "sleep 3600"))["spec"]
    del template["nodeName"]
    template["restartPolicy"] = "Never"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sleeper"},
           "spec": {"backoffLimit": 5, "template": {"metadata": {"labels": {"app": "sleeper"}},
                                                    "spec": template}}}
    k8s.kubectl("apply", "-f", "-", input=json.dumps(job))

    def running(pods: dict[str, Any]) -> list[dict[str, Any]]:
        return [p for p in pods["items"] if phase(p) == "Running"
                and not p["metadata"].get("deletionTimestamp")]

    try:
        first = k8s.wait_for("pods -l app=sleeper", lambda ps: len(running(ps)) == 1,
                             timeout=60)
        old = running(first)[0]["metadata"]["name"]
        t0 = time.monotonic()
        k8s.kubectl("delete", "pod", old, "--wait=false")
        k8s.wait_for("pods -l app=sleeper", lambda ps: any(
            p["metadata"]["name"] != old for p in running(ps)), timeout=60, interval=0.1)
        print(f"a new pod of the job running {time.monotonic() - t0:.1f} s after the delete")
    finally:
        k8s.kubectl("delete", "job", "sleeper", "--cascade=foreground", "--wait=false")
