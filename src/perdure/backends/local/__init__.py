"""The local backend: replicas as processes on this machine, one supervisor process each.

`LocalBackend` loads on first use: importing a submodule (the GPU discovery) stays cheap.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs start-up time; for type checkers only
    from typing import Any

    from perdure.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]


def __getattr__(name: str) -> Any:
    if name != "LocalBackend":
        raise AttributeError(f"module 'perdure.backends.local' has no attribute {name!r}")
    return importlib.import_module("perdure.backends.local.backend").LocalBackend
