"""A real Slurm cluster of network-namespace hosts for the tests (cluster.sh does the work).

`SlurmCluster.up()` makes hosts head (the login node: slurmctld, and where perdure runs, as a
user runs it on a login node), a, b and c (slurmd) on a bridge of their own, with a random
name prefix, a random 10.20-63.x.0/24 subnet that no route of this machine touches (the Ray
tests take 10.64-250) and a private base dir, so parallel runs never collide; no host has a
default route: every packet stays on the bridge. `down()` removes all of it.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers.nshosts import free_subnet

SCRIPT = Path(__file__).resolve().with_name("cluster.sh")
NODES = ("a", "b", "c")


class SlurmUnavailable(RuntimeError):
    """No Slurm cluster can be made here (not root, Slurm or munge not installed)."""


def _pick_subnet() -> ipaddress.IPv4Network:
    try:
        return free_subnet(20, 63)
    except RuntimeError as exc:
        raise SlurmUnavailable(str(exc)) from None


class SlurmCluster:
    def __init__(self, nodes: tuple[str, ...] = NODES, grace_time: int = 30) -> None:
        for tool in ("slurmctld", "slurmd", "munged", "sbatch", "ip", "nsenter", "unshare"):
            if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
                raise SlurmUnavailable(f"{tool} is not installed (apt-get install slurm-wlm "
                                       "munge)")
        if os.geteuid() != 0:
            raise SlurmUnavailable("namespace hosts need root")
        self.nodes = nodes
        self.subnet = _pick_subnet()
        net = str(self.subnet.network_address).rsplit(".", 1)[0]
        self.prefix = "ps" + secrets.token_hex(2)
        self.base = Path(tempfile.mkdtemp(prefix="perdure-slurm-"))
        self.env = {**os.environ, "SLURM_NS_PREFIX": self.prefix, "SLURM_NS_NET": net,
                    "SLURM_NS_BASE": str(self.base), "SLURM_NS_NODES": " ".join(nodes),
                    "GRACE_TIME": str(grace_time),
                    "SLURM_CONF": str(self.base / "etc" / "slurm.conf")}
        self.head_address = f"{net}.10"
        # what perdure runs here (the controller, and the steps srun gives its environment)
        # keeps its node-local files under the base dir, removed with the cluster
        (self.base / "tmp").mkdir()
        self.env["TMPDIR"] = str(self.base / "tmp")

    def sh(self, *args: str, check: bool = True, timeout: float = 120
           ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                              env=self.env, check=check, timeout=timeout)

    def up(self) -> None:
        r = self.sh("up", check=False)
        if r.returncode != 0:
            self.down()
            raise SlurmUnavailable(f"the Slurm cluster did not come up: {r.stderr[-2000:]}")
        route = subprocess.run(["ip", "route", "get", self.head_address], capture_output=True,
                               text=True, check=True).stdout
        if f"dev {self.prefix}0" not in route:  # never talk to an address off the bridge
            self.down()
            raise SlurmUnavailable(f"{self.head_address} is not routed to the test bridge")

    def down(self) -> None:
        self.sh("down", check=False)
        shutil.rmtree(self.base, ignore_errors=True)

    def on_head(self, *argv: str) -> list[str]:
        """argv run on the login node (host head), as a user there runs it."""
        return ["bash", str(SCRIPT), "exec", "head", *argv]

    def kill(self, node: str) -> None:
        """The host dies: every process of its namespace is SIGKILLed."""
        self.sh("kill", node)

    def start(self, node: str) -> None:
        self.sh("start", node)

    def run(self, *argv: str, timeout: float = 60) -> str:
        """A Slurm command on the head; its stdout."""
        return subprocess.run(self.on_head(*argv), capture_output=True, text=True,
                              env=self.env, check=True, timeout=timeout).stdout

    def wait_idle(self, nodes: tuple[str, ...] | None = None, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        want = set(nodes or self.nodes)
        while time.monotonic() < deadline:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t")
            idle = {line.split()[0] for line in out.splitlines()
                    if line.split()[1] in ("idle", "mix", "alloc")}
            if want <= idle:
                return
            time.sleep(0.3)
        raise TimeoutError(f"nodes {sorted(want)} not idle after {timeout}s")
