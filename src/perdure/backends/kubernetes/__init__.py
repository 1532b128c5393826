"""The Kubernetes backend: replicas as processes of per-attempt agent pods, one per node.

Nothing is imported until a name is used (the backend is selected by `backend: kubernetes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perdure.backends.kubernetes.backend import KubernetesBackend

__all__ = ["KubernetesBackend"]


def __getattr__(name: str) -> Any:
    if name == "KubernetesBackend":
        from perdure.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend
    raise AttributeError(f"module 'perdure.backends.kubernetes' has no attribute {name!r}")
