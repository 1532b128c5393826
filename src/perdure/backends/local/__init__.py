"""The local backend: replicas as processes on this machine, one supervisor process each.

Names load on first use so that the supervisor, which imports a submodule of this package on
every replica start, does not pay for the backend's imports.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every supervisor start-up time; for type checkers only
    from typing import Any

    from perdure.backends.local.backend import LocalBackend
    from perdure.backends.local.pool import summary as warm_pool_summary
    from perdure.backends.local.replicas import signal_replica

_EXPORTS = {
    "LocalBackend": "perdure.backends.local.backend",
    "signal_replica": "perdure.backends.local.replicas",
    "warm_pool_summary": "perdure.backends.local.pool",
}
_NAMES = {"warm_pool_summary": "summary"}

__all__ = ["LocalBackend", "signal_replica", "warm_pool_summary"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'perdure.backends.local' has no attribute {name!r}")
    return getattr(importlib.import_module(module), _NAMES.get(name, name))
