"""Backend replies the controller can act on; anything else fails its launch, never the controller.

Whatever a backend returns (a Ray actor's answer, a record a node wrote, a bug) is checked here,
field by field, before the core sees it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from perdure.core.events import (
    Command,
    ErrorInfo,
    LaunchFailed,
    LaunchQueued,
    NodeCheckFailed,
    Observation,
    ReplicaExited,
    ReplicaProgress,
    ReplicaStarted,
)

RECORD_CHARS = 300  # of a bad record, quoted in the job's event


class Unexpected(ValueError):
    """A backend's reply that is not an observation the protocol allows."""


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _launch_id(v: Any) -> bool:
    # <job id>.<attempt>.<replica>...: the core finds the job from what precedes the first dot
    return isinstance(v, str) and 0 < len(v) <= 512 and "." in v and not v.startswith(".")


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _error(v: Any) -> bool:
    return isinstance(v, ErrorInfo) and all(
        _str(getattr(v, f)) for f in ("type", "message", "traceback", "source"))


# What each observation a backend may send must hold, field by field.
FIELDS: dict[type, dict[str, Callable[[Any], bool]]] = {
    ReplicaStarted: {"launch_id": _launch_id, "pid": lambda v: _int(v) and v > 0,
                     "time": _num},
    ReplicaExited: {"launch_id": _launch_id, "exit_code": _int, "time": _num,
                    "signal": _optional(_int), "oom": lambda v: isinstance(v, bool),
                    "error": _optional(_error), "peak_rss_mb": _optional(_num),
                    "stderr_tail": _str},
    LaunchFailed: {"launch_id": _launch_id, "message": _str, "time": _num,
                   "user_error": lambda v: isinstance(v, bool)},
    LaunchQueued: {"launch_id": _launch_id, "reason": _str, "time": _num, "where": _str,
                   "detail": _str},
    ReplicaProgress: {"launch_id": _launch_id, "step": _optional(_int), "time": _num, "steps": _int,
                      "step_seconds": _optional(_num), "save_seconds": _optional(_num),
                      "restores": lambda v: isinstance(v, tuple) and all(map(_str, v))},
    Command: {"kind": _str, "target": _str, "time": _num,
              "hold": lambda v: isinstance(v, bool), "why": _str},
    NodeCheckFailed: {"node": _str, "message": _str, "time": _num},
}


def describe(obs: object) -> str:
    try:
        text = repr(obs)
    except Exception as err:  # a reply whose repr fails is still named
        text = f"<{type(obs).__name__}: repr failed: {err}>"
    return text if len(text) <= RECORD_CHARS else text[:RECORD_CHARS] + "..."


def error_words(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"


def vet(obs: object) -> Observation:
    """`obs` if every field is as the protocol says; else Unexpected saying which."""
    checks = FIELDS.get(type(obs))
    if checks is None:
        raise Unexpected(f"not an observation a backend may send ({type(obs).__name__})")
    for name, ok in checks.items():
        if not ok(getattr(obs, name, None)):
            raise Unexpected(f"its {name} is {describe(getattr(obs, name, None))}")
    return obs  # type: ignore[return-value]  # the table checked its type


def failed(obs: object, why: str, now: float) -> LaunchFailed | None:
    """The launch failure that replaces a bad reply; None when it names no launch."""
    launch_id = getattr(obs, "launch_id", None)
    if not isinstance(launch_id, str) or not _launch_id(launch_id):
        return None
    return LaunchFailed(launch_id, f"the backend sent an unexpected reply ({why}): "
                                   f"{describe(obs)}", now)
