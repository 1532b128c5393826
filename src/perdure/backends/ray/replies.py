"""What a launch actor's answer means, given the question it answers (`started` or `exit`).

Answers are read by the question asked, never by the order they come in: a replica that ends
before its start is read answers with an exit record, its end. No side effects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

STARTED, EXIT = "started", "exit"


class UnexpectedReply(ValueError):
    """An answer that is neither a status record, an exit record nor None."""


@dataclass(frozen=True)
class Next:
    """A start (pid, started at, status) and an exit to report; the next question (None:
    over)."""

    ask: str | None
    started: tuple[int, float, dict[str, Any]] | None = None
    exited: dict[str, Any] | None = None
    check_failed: str | None = None  # its node failed its preflight check: why


def _start(record: dict[str, Any]) -> tuple[int, float, dict[str, Any]] | None:
    pid, at = record.get("pid"), record.get("started_at")
    if (isinstance(pid, int) and not isinstance(pid, bool) and pid > 0
            and isinstance(at, int | float) and not isinstance(at, bool) and math.isfinite(at)):
        return pid, float(at), record
    return None


def _is_exit(record: dict[str, Any]) -> bool:
    code, at = record.get("exit_code"), record.get("time")
    timed = isinstance(at, int | float) and not isinstance(at, bool) and math.isfinite(at)
    if "exit_code" in record:
        return isinstance(code, int) and not isinstance(code, bool) and timed
    return isinstance(record.get("spawn_error"), str)  # it never ran: why


def read(asked: str, started: bool, answer: Any) -> Next:
    """What `answer` to `asked` means for a launch whose start was (not) reported yet."""
    if answer is None:
        # The wait ran out (or it ended unstarted): ask for its end, or for its start again
        # while that was not seen (a slow start).
        return Next(EXIT if asked == STARTED or started else STARTED)
    if not isinstance(answer, dict) or asked not in (STARTED, EXIT):
        raise UnexpectedReply(f"the answer to {asked!r} is not a record: {answer!r:.300}")
    if _is_exit(answer):  # whichever was asked: an end is an end
        return Next(None, exited=answer)
    start = _start(answer)
    if start is not None:
        return Next(EXIT, started=None if started else start)
    if isinstance(answer.get("check_failed"), str) and asked == STARTED:
        return Next(EXIT, check_failed=answer["check_failed"])  # held until it is stopped
    raise UnexpectedReply(f"the answer to {asked!r} is neither a status nor an exit record: "
                          f"{answer!r:.300}")
