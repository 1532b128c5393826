"""Pick the backend a cluster file names; ray is imported only when it is selected."""

from __future__ import annotations

from pathlib import Path

from perdure.backends.base import Backend, NodeInfo
from perdure.core.spec import ClusterSpec


def make_backend(cluster: ClusterSpec, state_dir: Path) -> Backend:
    nodes = [NodeInfo(n.name, n.slots) for n in cluster.nodes]
    if cluster.backend == "local":
        from perdure.backends.local import LocalBackend

        return LocalBackend(state_dir, nodes, transport=cluster.transport)
    if cluster.backend == "fake":
        from perdure.backends.fake import FakeBackend

        return FakeBackend(nodes)
    raise ValueError(
        f"backend: {cluster.backend!r} is not available yet; use 'local' (or 'fake' for tests)"
    )
