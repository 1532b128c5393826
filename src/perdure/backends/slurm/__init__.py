"""The Slurm backend: replicas as job steps of per-attempt allocations, node agents as steps.

Nothing is imported until a name is used (the backend is selected by `backend: slurm`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perdure.backends.slurm.backend import SlurmBackend

__all__ = ["SlurmBackend"]


def __getattr__(name: str) -> Any:
    if name == "SlurmBackend":
        from perdure.backends.slurm.backend import SlurmBackend

        return SlurmBackend
    raise AttributeError(f"module 'perdure.backends.slurm' has no attribute {name!r}")
