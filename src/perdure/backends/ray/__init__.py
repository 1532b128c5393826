"""The Ray backend: replicas as detached actors on the Ray nodes of perdure nodes.

Nothing here imports ray until a name is used (the backend is selected by a cluster file's
`backend: ray`); `perdure.backends.ray.checks` is pure and never does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perdure.backends.ray.backend import RayBackend

__all__ = ["RayBackend"]


def __getattr__(name: str) -> Any:
    if name == "RayBackend":
        from perdure.backends.ray.backend import RayBackend

        return RayBackend
    raise AttributeError(f"module 'perdure.backends.ray' has no attribute {name!r}")
