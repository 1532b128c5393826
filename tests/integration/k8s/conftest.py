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

from collections.abc import Iterator
from pathlib import Path

import pytest
from k8scluster import REPO, K8sCluster, K8sUnavailable
from k8stest import WORKERS, K8sPerdure, clean, ddp_spec, host_dirs
from tests.helpers.clusterjobs import local_reference_sha
from tests.helpers.harness import kill_leftovers


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


@pytest.fixture
def k8s_perdure(tmp_path: Path, k8s: K8sCluster,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[K8sPerdure]:
    k8s.assert_routed()
    monkeypatch.setenv("PERDURE_K8S_HOST_DIRS", host_dirs(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(REPO / "src"))
    p = K8sPerdure(tmp_path)
    p.k8s = k8s
    yield p
    kill_leftovers(p.state)
    clean(k8s)


@pytest.fixture(scope="session")
def local_sha(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final weights of an uninterrupted ddp_mlp run on the local backend (once)."""
    return local_reference_sha(tmp_path_factory.mktemp("local-reference"), ddp_spec)
