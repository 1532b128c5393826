"""The state dir's controller lock (flock on `controller.lock`, the pid inside; closing the
descriptor releases it).

A command-line tool takes it for a moment to act while no controller can start
(controller/usercommands.py); a starting controller waits such a moment out.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from perdure import statedir

START_WAIT_SECONDS = 0.5


def try_lock(state_dir: Path, pid: bool = False) -> int | None:
    """The lock's descriptor if it was free (now held here; `pid`: this pid written in),
    None when a controller holds it."""
    fd = os.open(state_dir / statedir.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    if pid:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
    return fd


def lock_for_controller(state_dir: Path) -> int | None:
    """`try_lock` for a starting controller, waiting START_WAIT_SECONDS for a tool's moment."""
    deadline = time.monotonic() + START_WAIT_SECONDS
    while True:
        fd = try_lock(state_dir, pid=True)
        if fd is not None or time.monotonic() >= deadline:
            return fd
        time.sleep(0.05)
