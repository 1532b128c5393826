"""A real Kubernetes cluster of network-namespace hosts for the tests (cluster.sh does the work).

`K8sCluster.up()` makes host cp (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) and workers a and b (containerd, runc and a kubelet each) on a bridge of their
own, with a random name prefix, a random 10.251-253.x.0/24 subnet that no route of this machine
touches (Slurm's tests take 10.20-63, Ray's 10.64-250) and a private base dir, so parallel runs
never collide; no host has a default route. The images pods run are made here from local files
(images.py) and imported into every worker's containerd: nothing is pulled. `down()` removes
all of it. The binaries come from k8s/cluster/build.sh (K8S_BIN, default its output dir).
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import k8simages as images
from tests.helpers.nshosts import free_subnet

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "cluster.sh"
REPO = HERE.parents[2]
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
              "kubectl", "pause")
NODES = ("a", "b")
BUILD_HINT = "build them with `make k8s-cluster` (k8s/cluster/build.sh; about 900 CPU-seconds cold)"


class K8sUnavailable(RuntimeError):
    """No Kubernetes cluster can be made here: the reason, for a skip."""


def _release() -> str:
    """The Kubernetes release k8s/cluster/go.mod requires."""
    for line in (REPO / "k8s/cluster/go.mod").read_text().splitlines():
        words = line.replace("require", "").split()
        if words[:1] == ["k8s.io/kubernetes"] and len(words) == 2:
            return words[1]
    raise K8sUnavailable("k8s/cluster/go.mod requires no k8s.io/kubernetes")


CACHE = Path(os.environ.get("PERDURE_K8S_CACHE") or Path.home() / ".cache" / "perdure-k8s")
BIN = Path(os.environ.get("K8S_BIN") or CACHE
           / "bin" / _release())


def missing() -> str | None:
    """Why the cluster cannot be made here, or None."""
    absent = [c for c in COMPONENTS if not (BIN / c).is_file()]
    if absent:
        return f"{', '.join(absent)} not in {BIN}: {BUILD_HINT}"
    for tool in ("containerd", "runc", "ctr", "openssl", "ip", "nsenter", "unshare", "curl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install containerd runc " \
                   "containernetworking-plugins busybox-static)"
    if not Path("/usr/lib/cni/bridge").exists() or not images.BUSYBOX.exists():
        return "apt-get install containernetworking-plugins busybox-static"
    if os.geteuid() != 0:
        return "namespace hosts need root"
    return None


def _pick_subnet() -> ipaddress.IPv4Network:
    try:
        return free_subnet(251, 253)
    except RuntimeError as exc:
        raise K8sUnavailable(str(exc)) from None


class K8sCluster:
    def __init__(self, nodes: tuple[str, ...] = NODES, extra_images: tuple[Path, ...] = ()
                 ) -> None:
        reason = missing()
        if reason:
            raise K8sUnavailable(reason)
        self.nodes = nodes
        self.subnet = _pick_subnet()
        net = str(self.subnet.network_address).rsplit(".", 1)[0]
        self.prefix = "pk" + secrets.token_hex(2)
        self.base = Path(tempfile.mkdtemp(prefix="perdure-k8s-"))
        tars = [images.pause_image(self.base / "pause.tar", BIN / "pause"),
                images.tools_image(self.base / "tools.tar"), *extra_images]
        self.env = {**os.environ, "K8S_NS_PREFIX": self.prefix, "K8S_NS_NET": net,
                    "K8S_NS_BASE": str(self.base), "K8S_NS_NODES": " ".join(nodes),
                    "K8S_BIN": str(BIN), "K8S_IMAGES": " ".join(map(str, tars))}
        self.cp_address = f"{net}.10"
        self.gateway = f"{net}.1"
        self.addresses = {n: f"{net}.{11 + i}" for i, n in enumerate(nodes)}
        self.kubeconfig = self.base / "etc" / "admin.kubeconfig"
        self.server = f"https://{self.cp_address}:6443"
        self.seconds_up = 0.0

    def sh(self, *args: str, check: bool = True, timeout: float = 240
           ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                              env=self.env, check=check, timeout=timeout)

    def up(self) -> None:
        t0 = time.monotonic()
        r = self.sh("up", check=False)
        if r.returncode != 0:
            logs = self.logs_tail()
            self.down()
            raise K8sUnavailable(f"the Kubernetes cluster did not come up: {r.stderr[-3000:]}"
                                 f"\n{logs}")
        self.seconds_up = time.monotonic() - t0
        self.assert_routed()

    def assert_routed(self) -> None:
        """Never talk to an address off the bridge (see MACHINE-NOTES)."""
        route = subprocess.run(["ip", "route", "get", self.cp_address], capture_output=True,
                               text=True, check=True).stdout
        if f"dev {self.prefix}0" not in route:
            raise K8sUnavailable(f"{self.cp_address} is not routed to the test bridge: {route}")

    def logs_tail(self, lines: int = 15) -> str:
        out = []
        for log in sorted((self.base / "log").glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def down(self) -> None:
        self.sh("down", check=False)
        shutil.rmtree(self.base, ignore_errors=True)

    def kill(self, node: str) -> None:
        """The host dies: every process of its namespace (kubelet, containerd, pods) SIGKILLed."""
        self.sh("kill", node)

    def start(self, node: str) -> None:
        self.sh("start", node)

    def on(self, node: str, *argv: str) -> list[str]:
        """argv run as host `node`."""
        return ["bash", str(SCRIPT), "exec", node, *argv]

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60) -> str:
        r = subprocess.run(["bash", str(SCRIPT), "kubectl", *args], capture_output=True,
                           text=True, env=self.env, input=input, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args))

    def wait_for(self, what: str, predicate: Any, timeout: float = 60,
                 interval: float = 0.3) -> Any:
        """Poll `kubectl get what` until predicate(object) is true; the object."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.get(*what.split())
            except RuntimeError:
                last = None
            if last is not None and predicate(last):
                return last
            time.sleep(interval)
        raise TimeoutError(f"{what} not as wanted after {timeout}s: "
                           f"{json.dumps(last)[-1500:] if last else None}")
