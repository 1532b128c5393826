"""Make the calling thread (or the writer process) yield to training: the lowest CPU priority
(nice 19) and the lowest best-effort I/O priority, so that a background save takes the CPU and
disk time the training step leaves idle instead of slowing the step.

Linux gives each thread its own nice value and I/O priority, so this affects only the
thread that calls it. Elsewhere, or where the kernel refuses, it does nothing (best effort).

A nice value does not govern the GIL, though: a background thread that holds it keeps the
training thread waiting for up to the interpreter's switch interval (5 ms by default) each
time the training thread wants it back (after a collective or a backward pass, which run
without it). ``short_switch`` shortens that interval while background work runs.

Side effects: changes the calling thread's scheduling priority; ``short_switch`` changes the
process's switch interval while it is entered.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import sys
import threading
from collections.abc import Iterator

log = logging.getLogger("perdure.checkpoint")

NICE = 19
_IOPRIO_WHO_PROCESS = 1  # a thread id, on Linux
_IOPRIO_CLASS_BE = 2
_IOPRIO_LOWEST = 7
_IOPRIO_CLASS_SHIFT = 13
_SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "ppc64le": 273, "s390x": 282}
# The GIL's switch interval while background work runs (None: leave it alone). At 0.5 ms a
# training thread waits at most about that long for the GIL; the extra switches happen only
# while both threads want it.
SWITCH_S: float | None = 0.0005
_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved: tuple[float, float] | None = None  # (the interval before, the one we set)


def lower_this_thread() -> bool:
    """Lower the calling thread's CPU and I/O priority; True when both took effect."""
    tid = threading.get_native_id()
    cpu = io = False
    try:
        os.setpriority(os.PRIO_PROCESS, tid, NICE)
        cpu = True
    except (OSError, AttributeError):
        log.debug("could not lower the checkpoint writer's CPU priority", exc_info=True)
    number = _SYS_IOPRIO_SET.get(platform.machine())
    if number is not None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            value = (_IOPRIO_CLASS_BE << _IOPRIO_CLASS_SHIFT) | _IOPRIO_LOWEST
            io = libc.syscall(number, _IOPRIO_WHO_PROCESS, tid, value) == 0
        except (OSError, AttributeError):
            io = False
    return cpu and io


@contextlib.contextmanager
def short_switch() -> Iterator[None]:
    """Within the block, the GIL's switch interval is at most SWITCH_S; the previous interval
    comes back when the last block of any thread ends, unless the program set another one
    meanwhile."""
    global _switch_users, _switch_saved
    with _switch_lock:
        _switch_users += 1
        if _switch_users == 1:
            before = sys.getswitchinterval()
            if SWITCH_S is not None and before > SWITCH_S:
                sys.setswitchinterval(SWITCH_S)
                _switch_saved = (before, sys.getswitchinterval())
    try:
        yield
    finally:
        with _switch_lock:
            _switch_users -= 1
            if _switch_users == 0 and _switch_saved is not None:
                before, ours = _switch_saved
                if sys.getswitchinterval() == ours:  # not changed by the program meanwhile
                    sys.setswitchinterval(before)
                _switch_saved = None
