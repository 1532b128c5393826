"""perdure: PyTorch training that survives failure.

Training scripts call `perdure.init()`; everything else they use lives in `perdure.runtime`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from perdure.runtime.context import Context, init


def __getattr__(name: str) -> Any:
    if name in ("init", "Context"):
        from perdure.runtime import context

        return getattr(context, name)
    raise AttributeError(f"module 'perdure' has no attribute {name!r}")


__all__ = ["Context", "__version__", "init"]
