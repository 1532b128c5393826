"""A warm-started replica's process title: `ps` shows the replica's command, not the standby's.

A warm standby (or a child of the zygote) runs the replica's script in an interpreter started
with perdure's own command line, which is what `ps` and /proc/PID/cmdline show. `set_title`
writes the replica's command over that command line's memory (the kernel's arg_start..arg_end
of /proc/self/stat, which nothing reads once the interpreter has started: CPython keeps its
own copies), cut to the room there is, and sets the thread name (`ps -o comm`, top) to the
script's name. Linux only; anything unexpected leaves the title as it was.
"""

from __future__ import annotations

import ctypes
import os

PR_SET_NAME = 15
COMM_BYTES = 15  # the kernel's TASK_COMM_LEN less its NUL


def set_title(argv: list[str]) -> bool:
    """Show `argv` as this process's command line; whether it could be written."""
    _set_comm(os.path.basename(argv[1] if len(argv) > 1 else argv[0]))
    area = _arg_area()
    if area is None:
        return False
    start, end = area
    room = end - start
    if room < 2:
        return False
    text = "\0".join(argv).encode(errors="replace")[: room - 1]
    ctypes.memmove(start, text + b"\0" * (room - len(text)), room)
    return True


def _arg_area() -> tuple[int, int] | None:
    """(arg_start, arg_end) of this process: /proc/self/stat's fields 48 and 49."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read().decode()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, from field 3
    if len(fields) < 47:
        return None
    start, end = int(fields[45]), int(fields[46])
    return (start, end) if 0 < start < end else None


def _set_comm(name: str) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_NAME, name.encode(errors="replace")[:COMM_BYTES], 0, 0, 0)
    except (OSError, AttributeError):
        return
