"""One real Slurm cluster of namespace hosts (head, a, b, c) for every Slurm test of a session.

perdure runs on head, the login node, as a user runs it there (`cluster.on_head`); the test
reads the state dir directly. Each test cancels what it left in Slurm (its allocations, and
with them every step and replica) and leaves the hosts up. `make test-slurm` runs these under
the heavy-run lock (flock /tmp/perdure-heavy.lock).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import NODES, SlurmCluster, SlurmUnavailable
from tests.helpers.clusterjobs import (
    controller_conftest,
    final_sha,
    local_reference_sha,
    nodes_field,
)
from tests.helpers.clusterjobs import ddp_spec as _ddp_spec

HERE = Path(__file__).resolve().parent

_cc = controller_conftest()
Perdure = _cc.Perdure


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    try:
        cluster = SlurmCluster()
        cluster.up()
    except (SlurmUnavailable, OSError) as exc:
        pytest.skip(f"no Slurm cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.down()


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


@pytest.fixture
def slurm_perdure(tmp_path: Path, slurm_cluster: SlurmCluster) -> Iterator[SlurmPerdure]:
    p = SlurmPerdure(tmp_path)
    p.slurm = slurm_cluster
    yield p
    _cc._kill_leftovers(p.state)  # the controller (its command line names the state dir)
    clean(slurm_cluster)


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


@pytest.fixture(scope="session")
def local_sha(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final weights of an uninterrupted ddp_mlp run on the local backend (once)."""
    return local_reference_sha(tmp_path_factory.mktemp("local-reference"), ddp_spec)


__all__ = ["SlurmPerdure", "ddp_spec", "final_sha"]
