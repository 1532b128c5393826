"""One real Kubernetes cluster of namespace hosts (cp, a, b) for every Kubernetes test of a
session; skipped, with the reason, where it cannot be made (binaries not built: k8s/cluster/
build.sh; containerd, runc or root missing). `make test-k8s` runs the long tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from k8scluster import K8sCluster, K8sUnavailable


@pytest.fixture(scope="session")
def k8s() -> Iterator[K8sCluster]:
    try:
        cluster = K8sCluster()
        cluster.up()
    except K8sUnavailable as exc:
        pytest.skip(f"no Kubernetes test cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.down()
