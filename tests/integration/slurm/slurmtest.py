"""The Slurm tests' harness: perdure's CLI on the login node of the session's Slurm cluster."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cluster import NODES, SlurmCluster
from tests.helpers.clusterjobs import ddp_spec as _ddp_spec
from tests.helpers.clusterjobs import nodes_field
from tests.helpers.harness import Perdure

HERE = Path(__file__).resolve().parent


class SlurmPerdure(Perdure):
    """perdure's CLI on the login node of `slurm`."""

    slurm: SlurmCluster

    def slurm_cluster(self, nodes: dict[str, int] | None = None, **slurm: Any) -> Path:
        data: dict[str, Any] = {"backend": "slurm",
                                "slurm": {"partition": "main", "shared_dirs": [str(self.root)],
                                          **slurm}}
        if nodes is not None:
            data["nodes"] = nodes_field(nodes)
        return self.write("slurm.yaml", data)

    def base(self) -> list[str]:
        return self.slurm.on_head(sys.executable, "-m", "perdure.cli.main", "--state-dir",
                                  str(self.state))

    def cli(self, *args: str, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([*self.base(), *args], capture_output=True, text=True,
                           timeout=timeout, env=self.slurm.env)
        # the command's own words on failure (a bare CalledProcessError shows only its status)
        assert not check or r.returncode == 0, (
            f"perdure {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*self.base(), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=self.slurm.env)


def clean(cluster: SlurmCluster) -> None:
    """Cancel every allocation (their steps and replicas die with them); hosts up and idle."""
    with contextlib.suppress(subprocess.SubprocessError):
        cluster.run("scancel", "--me")
    status = cluster.sh("status", check=False).stdout
    for node in NODES:  # a test that killed a host leaves it up again for the next
        if "alive" not in _line(status, f"slurmd-{node} "):
            cluster.kill(node)
            cluster.start(node)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not cluster.run("squeue", "-h", "--me").strip():
            break
        time.sleep(0.3)
    cluster.wait_idle()


def _line(text: str, start: str) -> str:
    return next((line for line in text.splitlines() if line.startswith(start)), "")


def ddp_spec(p: Perdure, name: str, step_time: float = 0.0, replicas: int = 4,
             grace: float = 30) -> Path:
    """examples/ddp_mlp as `name` (clusterjobs.ddp_spec), one thread a replica (the hosts
    share two cores) and `grace` seconds to save when Slurm preempts it."""
    return _ddp_spec(p, name, step_time, replicas, env={"OMP_NUM_THREADS": "1"},
                     preemption={"grace_seconds": grace})
