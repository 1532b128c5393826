"""One real Kubernetes cluster of namespace hosts (cp, a, b, c) for every Kubernetes test of a
session; skipped, with the reason, where it cannot be made (binaries not built: k8s/cluster/
build.sh; containerd, runc or root missing). `make test-k8s` runs the long tests.

perdure's controller runs in this machine's root namespace (on the test bridge's address,
where its agent pods reach it), with `backend: kubernetes` and the cluster's admin
kubeconfig. The agent pods run the small local image with this machine's interpreter, venv,
sources and the test's directory mounted from the host (PERDURE_K8S_HOST_DIRS): the worker
hosts share this machine's filesystem, as nodes sharing a volume at one path would.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8scluster import REPO, K8sCluster, K8sUnavailable
from k8simages import TOOLS_IMAGE
from tests.helpers.clusterjobs import (
    controller_conftest,
    final_sha,
    local_reference_sha,
    nodes_field,
)
from tests.helpers.clusterjobs import ddp_spec as _ddp_spec

_cc = controller_conftest()
Perdure = _cc.Perdure
WORKERS = ("a", "b", "c")  # a job of 4 on a and b; c is free for a replacement


@pytest.fixture(scope="session")
def k8s() -> Iterator[K8sCluster]:
    try:
        cluster = K8sCluster(nodes=WORKERS)
        cluster.up()
    except K8sUnavailable as exc:
        pytest.skip(f"no Kubernetes test cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.down()


class K8sPerdure(Perdure):
    """perdure's CLI on this machine against the test cluster."""

    k8s: K8sCluster

    def k8s_cluster(self, nodes: dict[str, int], **section: Any) -> Path:
        return self.write("k8s.yaml", {
            "backend": "kubernetes", "nodes": nodes_field(nodes),
            "kubernetes": {"kubeconfig": str(self.k8s.kubeconfig), "image": TOOLS_IMAGE,
                           **section}})

    def pods(self) -> list[dict[str, Any]]:
        """This test's agent pods (any state dir: one test at a time)."""
        items: list[dict[str, Any]] = self.k8s.get("pods", "-l", "perdure.dev/state")["items"]
        return items


def host_dirs(root: Path) -> str:
    """What the agent pods mount: this machine's interpreter, venv and sources read-only,
    the test's directory (spec, checkpoints) read-write."""
    venv = Path(sys.prefix)
    base = Path(os.path.realpath(sys.executable)).parents[1]
    ro = sorted({"/usr", "/lib", "/lib64", str(base), str(venv.resolve()), str(REPO)})
    return ":".join([*(f"{d}:ro" for d in ro), str(root)])


@pytest.fixture
def k8s_perdure(tmp_path: Path, k8s: K8sCluster,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[K8sPerdure]:
    k8s.assert_routed()
    monkeypatch.setenv("PERDURE_K8S_HOST_DIRS", host_dirs(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(REPO / "src"))
    p = K8sPerdure(tmp_path)
    p.k8s = k8s
    yield p
    _cc._kill_leftovers(p.state)
    clean(k8s)


def clean(k8s: K8sCluster) -> None:
    """Every agent pod gone, every worker host up and schedulable for the next test."""
    with contextlib.suppress(RuntimeError):
        k8s.kubectl("delete", "pods", "-l", "perdure.dev/state", "--grace-period=0",
                    "--force", "--wait=false")
    for node in k8s.nodes:
        n = k8s.get("node", node)
        ready = any(c["type"] == "Ready" and c["status"] == "True"
                    for c in n["status"]["conditions"])
        if not ready:
            k8s.kill(node)
            k8s.start(node)
        if n["spec"].get("unschedulable"):
            k8s.kubectl("uncordon", node)
    for node in k8s.nodes:
        k8s.wait_for(f"node {node}", lambda n: any(
            c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]),
            timeout=120)
    k8s.wait_for("pods -l perdure.dev/state", lambda ps: not ps["items"], timeout=60)


def ddp_spec(p: Any, name: str, step_time: float = 0.0, replicas: int = 4,
             grace: float = 30) -> Path:
    """examples/ddp_mlp as `name`, one thread a replica (the hosts share two cores)."""
    return _ddp_spec(p, name, step_time, replicas, env={"OMP_NUM_THREADS": "1"},
                     preemption={"grace_seconds": grace})


@pytest.fixture(scope="session")
def local_sha(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final weights of an uninterrupted ddp_mlp run on the local backend (once)."""
    return local_reference_sha(tmp_path_factory.mktemp("local-reference"), ddp_spec)


__all__ = ["K8sPerdure", "ddp_spec", "final_sha"]
