"""perdure: PyTorch training that survives failure.

Training scripts call `perdure.init()`; everything else they use lives in `perdure.runtime`.
This module imports nothing at start-up: every replica's supervisor imports the package.
"""

from __future__ import annotations

from perdure.versions import check_torch

check_torch()  # one line, before anything else fails on a torch it was not made for

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from perdure.runtime.context import Context, init

    __version__: str


def __getattr__(name: str) -> Any:
    if name == "__version__":  # pyproject's `version`, the one place it is written
        from importlib.metadata import version

        return version("perdure")
    if name in ("init", "Context"):
        from perdure.runtime import context

        return getattr(context, name)
    raise AttributeError(f"module 'perdure' has no attribute {name!r}")


__all__ = ["Context", "__version__", "init"]
