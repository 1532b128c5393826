"""One real Ray cluster of namespace hosts (head, a, b) for every Ray test of a session.

The controller runs in the root namespace (perdure's CLI, as a user runs it) and reaches the
head over the bridge. Hosts are killed and started again by the tests (`ray_hosts.kill("b")`,
`ray_hosts.start("b")`); each test leaves the cluster as it found it (both hosts up).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hosts import Hosts, HostsUnavailable, make_hosts
from raytest import SLOTS, RayPerdure, cmdline, kill_actors
from tests.helpers.clusterjobs import local_reference_sha
from tests.helpers.harness import kill_leftovers


@pytest.fixture(scope="session")
def ray_hosts() -> Iterator[Hosts]:
    try:
        hosts = make_hosts(SLOTS)
    except HostsUnavailable as exc:
        pytest.skip(f"no Ray hosts: {exc}")
    try:
        yield hosts
    finally:
        hosts.close()


@pytest.fixture
def ray_perdure(tmp_path: Path, ray_hosts: Hosts, request: pytest.FixtureRequest
                ) -> Iterator[RayPerdure]:
    p = RayPerdure(tmp_path)
    p.hosts = ray_hosts
    p.namespace = f"t{abs(hash(request.node.nodeid)) % 10**8}-{time.time_ns() % 10**6}"
    yield p
    kill_leftovers(p.state)
    kill_actors(p)
    for name in SLOTS:  # a test that killed a host leaves it up again for the next
        if not any("raylet" in cmdline(pid) for pid in ray_hosts.hosts[name].pids()):
            ray_hosts.kill(name)
            ray_hosts.start(name)


@pytest.fixture(scope="session")
def local_sha(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final weights of an uninterrupted ddp_mlp run on the local backend (once)."""
    return local_reference_sha(tmp_path_factory.mktemp("local-reference"))
