"""One real Slurm cluster of namespace hosts (head, a, b, c) for every Slurm test of a session.

perdure runs on head, the login node, as a user runs it there (`cluster.on_head`); the test
reads the state dir directly. Each test cancels what it left in Slurm (its allocations, and
with them every step and replica) and leaves the hosts up. `make test-slurm` runs these under
the heavy-run lock (flock /tmp/perdure-heavy.lock).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import SlurmCluster, SlurmUnavailable
from slurmtest import SlurmPerdure, clean, ddp_spec
from tests.helpers.clusterjobs import local_reference_sha
from tests.helpers.harness import kill_leftovers


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


@pytest.fixture
def slurm_perdure(tmp_path: Path, slurm_cluster: SlurmCluster) -> Iterator[SlurmPerdure]:
    p = SlurmPerdure(tmp_path)
    p.slurm = slurm_cluster
    yield p
    kill_leftovers(p.state)  # the controller (its command line names the state dir)
    clean(slurm_cluster)


@pytest.fixture(scope="session")
def local_sha(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final weights of an uninterrupted ddp_mlp run on the local backend (once)."""
    return local_reference_sha(tmp_path_factory.mktemp("local-reference"), ddp_spec)
