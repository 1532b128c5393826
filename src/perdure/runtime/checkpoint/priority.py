"""Make the calling thread (or the writer process) yield to training: the lowest CPU priority
(nice 19) and the lowest best-effort I/O priority, so that a background save takes the CPU and
disk time the training step leaves idle instead of slowing the step.

Linux gives each thread its own nice value and I/O priority, so this affects only the
thread that calls it. Elsewhere, or where the kernel refuses, it does nothing (best effort).

Side effects: changes the calling thread's scheduling priority.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import threading

log = logging.getLogger("perdure.checkpoint")

NICE = 19
_IOPRIO_WHO_PROCESS = 1  # a thread id, on Linux
_IOPRIO_CLASS_BE = 2
_IOPRIO_LOWEST = 7
_IOPRIO_CLASS_SHIFT = 13
_SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "ppc64le": 273, "s390x": 282}


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
