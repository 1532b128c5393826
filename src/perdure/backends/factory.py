"""Pick the backend a cluster file names; ray is imported only when it is selected."""

from __future__ import annotations

from pathlib import Path

from perdure.backends.base import Backend, Inspector, NodeInfo
from perdure.core.spec import ClusterSpec


def make_backend(cluster: ClusterSpec, state_dir: Path) -> Backend:
    nodes = [NodeInfo(n.name, n.slots, gpus=n.gpus or 0) for n in cluster.nodes]
    if cluster.backend == "local":
        from perdure.backends.local import LocalBackend
        from perdure.backends.local.gpus import local_nodes

        return LocalBackend(state_dir, local_nodes(cluster.nodes), transport=cluster.transport)
    if cluster.backend == "fake":
        from perdure.backends.fake import FakeBackend

        return FakeBackend(nodes)
    if cluster.backend == "ray":
        from perdure.backends.ray import RayBackend

        return RayBackend(state_dir, cluster)
    raise ValueError(f"backend: {cluster.backend!r} is unknown; use 'local', 'ray' or 'fake'")


def make_inspector(cluster: ClusterSpec, state_dir: Path) -> Inspector:
    """What the CLI reads and signals through; starts nothing (Ray connects on first signal)."""
    if cluster.backend == "ray":
        from perdure.backends.ray.inspector import RayInspector

        return RayInspector(state_dir, cluster)
    from perdure.backends.local.inspector import LocalInspector

    return LocalInspector(state_dir)
