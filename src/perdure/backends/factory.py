"""Pick the backend a cluster file names; ray is imported only when it is selected."""

from __future__ import annotations

from pathlib import Path

from perdure.backends.base import Backend, BackendSettingError, Inspector, NodeInfo
from perdure.core.clusterspec import ClusterSpec

# The agent-based backends: where their replicas run, and the platform's way to signal one.
AGENT_SIGNALS = {
    "slurm": ("on Slurm nodes", "scancel --signal on the allocation"),
    "kubernetes": ("in agent pods", "kubectl exec into the agent pod"),
}


def check_environment() -> None:
    """BackendSettingError naming an unusable variable the backends' node side reads."""
    from perdure.backends.node import logcap, warm

    try:
        warm.pool_size(None)
        warm.idle_seconds(None)
        logcap.max_bytes()
    except ValueError as exc:
        raise BackendSettingError(str(exc)) from None


def fixed_nodes(cluster: ClusterSpec) -> list[NodeInfo]:
    """The nodes of a local cluster as its backend will see them (GPUs found where the
    cluster file does not say)."""
    from perdure.backends.local.gpus import local_nodes

    return local_nodes(cluster.nodes)


def make_backend(cluster: ClusterSpec, state_dir: Path) -> Backend:
    nodes = [NodeInfo(n.name, n.slots, gpus=n.gpus or 0) for n in cluster.nodes]
    if cluster.backend == "local":
        from perdure.backends.local import LocalBackend
        from perdure.backends.preflight import Preflight

        health = cluster.health
        check = Preflight(health.preflight, health.timeout_seconds) if health.preflight else None
        return LocalBackend(state_dir, fixed_nodes(cluster), transport=cluster.transport,
                            preflight=check)
    if cluster.backend == "fake":
        from perdure.backends.fake import FakeBackend

        return FakeBackend(nodes)
    if cluster.backend == "ray":
        from perdure.backends.ray.backend import RayBackend

        return RayBackend(state_dir, cluster)
    if cluster.backend == "slurm":
        from perdure.backends.slurm.backend import SlurmBackend

        return SlurmBackend(state_dir, cluster)
    if cluster.backend == "kubernetes":
        from perdure.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend(state_dir, cluster)
    raise ValueError(f"backend: {cluster.backend!r} is unknown; use 'local', 'ray', 'slurm', "
                     "'kubernetes' or 'fake'")


def make_inspector(cluster: ClusterSpec, state_dir: Path) -> Inspector:
    """What the CLI reads and signals through; starts nothing (Ray connects on first signal)."""
    if cluster.backend == "ray":
        from perdure.backends.ray.inspector import RayInspector

        return RayInspector(state_dir, cluster)
    if cluster.backend in AGENT_SIGNALS:
        from perdure.backends.agents.inspector import AgentInspector

        return AgentInspector(state_dir, *AGENT_SIGNALS[cluster.backend])
    from perdure.backends.node.inspector import LocalInspector

    return LocalInspector(state_dir)
