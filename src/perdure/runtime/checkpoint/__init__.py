"""perdure checkpoints: async, sharded (torch DCP format), atomic, resumable on any world size.

Public names: Checkpointer, SavePolicy, OnBusy, SaveDecision, SaveStats, RankLocal and the
errors. Everything else in this package is internal. Names load on first use, so that the
writer process (``python -m perdure.runtime.checkpoint.writerchild``) imports only what it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perdure.runtime.checkpoint.checkpointer import Checkpointer
    from perdure.runtime.checkpoint.errors import (
        CheckpointError,
        CheckpointMismatchError,
        UnsupportedValueError,
    )
    from perdure.runtime.checkpoint.persist import SaveStats
    from perdure.runtime.checkpoint.policy import OnBusy, SaveDecision, SavePolicy
    from perdure.runtime.checkpoint.state import RankLocal

_EXPORTS = {
    "Checkpointer": "checkpointer",
    "CheckpointError": "errors",
    "CheckpointMismatchError": "errors",
    "UnsupportedValueError": "errors",
    "SaveStats": "persist",
    "OnBusy": "policy",
    "SaveDecision": "policy",
    "SavePolicy": "policy",
    "RankLocal": "state",
}

__all__ = [
    "CheckpointError",
    "CheckpointMismatchError",
    "Checkpointer",
    "OnBusy",
    "RankLocal",
    "SaveDecision",
    "SavePolicy",
    "SaveStats",
    "UnsupportedValueError",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'perdure.runtime.checkpoint' has no attribute {name!r}")
    return getattr(importlib.import_module(f"perdure.runtime.checkpoint.{module}"), name)
