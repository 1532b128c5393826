"""Backend settings read from an argument or the environment. No side effects."""

from __future__ import annotations

import os
from collections.abc import Callable

AUTO = "auto"


def count_or_auto(value: int | str | None, env: str, most: int,
                  problem: Callable[[int | str], str]) -> int | None:
    """A count from `value`, or from `$env` when it is None (unset: "auto"): None for "auto",
    else an integer from 0 to `most`; ValueError(problem(the value)) for anything else, so
    that the message names the setting as its caller knows it."""
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
