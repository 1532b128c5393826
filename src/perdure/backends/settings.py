"""Backend settings read from an argument or the environment. No side effects."""

from __future__ import annotations

import os
from collections.abc import Callable

AUTO = "auto"


def count_or_auto(value: int | str | None, env: str, most: int,
                  problem: Callable[[int | str], str]) -> int | None:
    """A count from 0 to `most` from `value`, else `$env` (unset: "auto"); None for "auto";
    ValueError(problem(the value)) for anything else."""
    raw: int | str = os.environ.get(env, AUTO) if value is None else value
    if raw == AUTO:
        return None
    try:
        count = int(raw)
    except ValueError:
        count = -1
    if not 0 <= count <= most:
        raise ValueError(problem(raw))
    return count
