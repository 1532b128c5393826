"""The state dir's controller lock: one controller drives a state dir at a time.

`<state dir>/controller.lock` is held (flock, exclusive) by the running controller, with its
pid inside. A command-line tool takes it for a moment to learn that no controller runs and to
act in its place while none can start (`controller/usercommands.py`); a controller that finds
it taken tries again for `START_WAIT_SECONDS` before it gives up, so such a moment never
stops one from starting.

Side effects: creates the lock file (0600), takes and releases the lock.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from perdure import statedir

START_WAIT_SECONDS = 0.5


def try_lock(state_dir: Path, pid: bool = False) -> int | None:
    """The lock's descriptor if it was free (now held here), None when a controller holds it.

    pid: write this process's id into the file (a controller does; a passing tool does not).
    """
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
    """`try_lock` for a starting controller: a tool holding the lock for a moment is waited
    out; None when it stays taken (another controller runs)."""
    deadline = time.monotonic() + START_WAIT_SECONDS
    while True:
        fd = try_lock(state_dir, pid=True)
        if fd is not None or time.monotonic() >= deadline:
            return fd
        time.sleep(0.05)


def release(fd: int) -> None:
    os.close(fd)  # closing the last descriptor drops the flock
