"""The JobSet controller on the Kubernetes test cluster, as a process of host cp.

`JobSet(cluster).up()` installs the JobSet CRD from the controller's own Go module source
(config/components/crd/bases), starts the controller built by k8s/jobset/build.sh on host cp
with the admin kubeconfig, and starts the cluster's name server (k8sdns.py: a pod's
`<hostname>.<subdomain>` resolves, as CoreDNS does on a real cluster) with every worker's
resolv.conf naming it. No webhook configuration is registered (no certificate manager here):
the JobSets applied must be complete without the defaulting webhook, as `perdure export k8s`
writes them. The controller's webhook server still listens (on cp's loopback, with a
certificate from the cluster's CA) because the controller will not start without it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from k8scluster import CACHE, SCRIPT, K8sCluster, K8sUnavailable

HERE = Path(__file__).resolve().parent
GO_MOD = HERE.parents[2] / "k8s" / "jobset" / "go.mod"
BUILD_HINT = "build it with `make k8s-jobset` (k8s/jobset/build.sh)"


def release() -> str:
    """The JobSet release k8s/jobset/go.mod requires."""
    for line in GO_MOD.read_text().splitlines():
        words = line.replace("require", "").split()
        if words[:1] == ["sigs.k8s.io/jobset"] and len(words) == 2:
            return words[1]
    raise K8sUnavailable(f"{GO_MOD} requires no sigs.k8s.io/jobset")


BINARY = CACHE / "bin" / f"jobset-{release()}" / "jobset-controller"
CRD = CACHE / "gomod" / "sigs.k8s.io" / f"jobset@{release()}" / "config" / "components" / "crd" \
    / "bases" / "jobset.x-k8s.io_jobsets.yaml"


def missing() -> str | None:
    """Why the JobSet controller cannot run here, or None."""
    for path in (BINARY, CRD):
        if not path.is_file():
            return f"{path} is absent: {BUILD_HINT}"
    return None


CONFIG = """apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection: {{leaderElect: false}}
internalCertManagement: {{enable: false}}
webhook: {{host: 127.0.0.1, port: 9443, certDir: "{certs}"}}
metrics: {{bindAddress: "0"}}
health: {{healthProbeBindAddress: "127.0.0.1:8081"}}
"""


class JobSet:
    def __init__(self, cluster: K8sCluster) -> None:
        reason = missing()
        if reason:
            raise K8sUnavailable(reason)
        self.cluster = cluster
        self.dir = cluster.base / "jobset"
        self.procs: list[subprocess.Popen[bytes]] = []

    def up(self, timeout: float = 120) -> None:
        self.dir.mkdir(exist_ok=True)
        self.cluster.kubectl("apply", "--server-side", "-f", str(CRD))
        self.cluster.wait_for("crd jobsets.jobset.x-k8s.io", lambda crd: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in crd.get("status", {}).get("conditions") or []))
        self._serving_cert()
        (self.dir / "config.yaml").write_text(CONFIG.format(certs=self.dir / "certs"))
        self._start("jobset-controller", [str(BINARY), "--kubeconfig",
                                          str(self.cluster.kubeconfig), "--config",
                                          str(self.dir / "config.yaml"), "--zap-log-level=info"])
        self._start("k8sdns", [sys.executable, str(HERE / "k8sdns.py"), self.cluster.cp_address,
                               str(self.cluster.env["K8S_BIN"]) + "/kubectl",
                               str(self.cluster.kubeconfig)])
        for node in self.cluster.nodes:
            self.point_resolver(node)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = subprocess.run(self.cluster.on("cp", "curl", "-sf", "--max-time", "1",
                                               "http://127.0.0.1:8081/readyz"),
                               capture_output=True, env=self.cluster.env)
            if r.returncode == 0:
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.5)
        raise K8sUnavailable(f"the JobSet controller is not ready: {self.log_tail()}")

    def point_resolver(self, node: str) -> None:
        """Host `node`'s resolv.conf (which kubelet gives hostNetwork pods) names cp's server;
        written in place: the host's /etc/resolv.conf is a bind mount of this file."""
        path = Path(f"/etc/netns/{self.cluster.prefix}-{node}/resolv.conf")
        with path.open("r+") as f:
            f.truncate(0)
            f.write(f"nameserver {self.cluster.cp_address}\noptions timeout:2 attempts:3\n")

    def _serving_cert(self) -> None:
        certs, pki = self.dir / "certs", self.cluster.base / "pki"
        certs.mkdir(exist_ok=True)
        key, csr = certs / "tls.key", certs / "tls.csr"
        subprocess.run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        str(key), "-subj", "/CN=jobset-webhook", "-out", str(csr)],
                       check=True, capture_output=True)
        ext = certs / "tls.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"),
                        "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "30",
                        "-extfile", str(ext), "-out", str(certs / "tls.crt")],
                       check=True, capture_output=True)

    def _start(self, name: str, argv: list[str]) -> None:
        log = (self.cluster.base / "log" / f"{name}.log").open("ab")
        self.procs.append(subprocess.Popen(
            ["bash", str(SCRIPT), "exec", "cp", *argv], stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, env=self.cluster.env, start_new_session=True))
        log.close()

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for name in ("jobset-controller", "k8sdns"):
            path = self.cluster.base / "log" / f"{name}.log"
            if path.exists():
                out.append(f"--- {name}\n" + "\n".join(
                    path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)

    def down(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()
