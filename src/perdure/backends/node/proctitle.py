"""A warm-started replica's process title: `ps` shows the replica's command, not the standby's.

The replica's command is written over the interpreter's command line memory (arg_start..arg_end
of /proc/self/stat; CPython keeps its own copies), cut to fit. Linux only; anything unexpected
leaves the title as it was.
"""

from __future__ import annotations

import ctypes
import os


def set_title(argv: list[str]) -> None:
    try:  # the kernel cuts it to its TASK_COMM_LEN
        with open("/proc/self/comm", "wb") as f:
            f.write(os.fsencode(os.path.basename(argv[1] if len(argv) > 1 else argv[0])))
    except OSError:
        pass
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read().decode()
    except OSError:
        return
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, from field 3
    if len(fields) < 47:
        return
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end
    room = end - start
    if start <= 0 or room < 2:
        return
    text = "\0".join(argv).encode(errors="replace")[: room - 1]
    ctypes.memmove(start, text + b"\0" * (room - len(text)), room)
