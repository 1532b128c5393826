"""Make the calling thread (or the writer process) yield to training: the lowest CPU priority
(nice 19), so that a background save takes the CPU time the training step leaves idle instead
of slowing the step. Linux gives each thread its own nice value, so this affects only the
thread that calls it; where the kernel refuses, it does nothing (best effort).

Side effects: changes the calling thread's scheduling priority.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("perdure.checkpoint")

NICE = 19


def lower_this_thread() -> None:
    """Lower the calling thread's CPU priority to the lowest."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (OSError, AttributeError):
        log.debug("could not lower the checkpoint writer's CPU priority", exc_info=True)
