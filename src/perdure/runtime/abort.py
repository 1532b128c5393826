"""Read why a process aborted in C++ (`terminate called after throwing an instance of 'X'`
and its `what():`), as torch's NCCL watchdog leaves it; the same dict as `errorfile`'s.
Only the standard library (the supervisor imports it).
"""

from __future__ import annotations

import re

from perdure.runtime.errorfile import MAX_MESSAGE_CHARS, split_prefix

_TERMINATE = re.compile(r"terminate called after throwing an instance of '([\w:<>, ]+)'")
_WHAT = re.compile(r"^\s*what\(\):\s*(.*)$")


def parse_abort(text: str) -> dict[str, str] | None:
    """The last C++ exception that terminated the process, from the tail of its stderr."""
    lines = [split_prefix(line)[2] for line in text.splitlines()]
    found = None
    for i, line in enumerate(lines):
        match = _TERMINATE.search(line)
        if match is not None:
            found = (i, match.group(1))
    if found is None:
        return None
    i, cxx_type = found
    message = ""
    for line in lines[i + 1: i + 4]:
        what = _WHAT.match(line)
        if what is not None:
            message = what.group(1).strip()
            break
    return {
        "type": cxx_type.rsplit("::", 1)[-1],
        "message": message[:MAX_MESSAGE_CHARS],
        "traceback": "\n".join(lines[i:i + 4])[:MAX_MESSAGE_CHARS],
        "source": "stderr",
    }
