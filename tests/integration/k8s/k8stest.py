"""The Kubernetes tests' harness: perdure's CLI against the session's test cluster."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from k8scluster import REPO, K8sCluster
from k8simages import TOOLS_IMAGE
from tests.helpers.clusterjobs import ddp_spec as _ddp_spec
from tests.helpers.clusterjobs import nodes_field
from tests.helpers.harness import Perdure

WORKERS = ("a", "b", "c")  # a job of 4 on a and b; c is free for a replacement


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
