"""The cache's inter-process file locks, made safe across fork(); CachedVolume decides what
to lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import weakref
from collections.abc import Iterator
from typing import Protocol

__all__ = ["file_lock", "reset_after_fork"]


class _Resettable(Protocol):
    def _init_runtime(self) -> None: ...


# A forked child (a DataLoader worker) shares the parent's flocks and would hold one a prefetch
# thread held at the fork for its whole life: it closes the lock descriptors at once.
_fd_guard = threading.Lock()
_lock_fds: set[int] = set()
_volumes: weakref.WeakSet[_Resettable] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _fd_guard
    for fd in _lock_fds:
        with contextlib.suppress(OSError):
            os.close(fd)  # the parent's lock stays held by the parent's descriptor
    _lock_fds.clear()
    _fd_guard = threading.Lock()
    for volume in list(_volumes):
        volume._init_runtime()


os.register_at_fork(  # lambdas: the child replaces _fd_guard
    before=lambda: _fd_guard.acquire(),
    after_in_parent=lambda: _fd_guard.release(),
    after_in_child=_after_fork_in_child,
)


@contextlib.contextmanager
def file_lock(path: str) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created if missing), across processes and threads."""
    with _fd_guard:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        _lock_fds.add(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        with _fd_guard:
            _lock_fds.discard(fd)
            os.close(fd)  # closing the last descriptor releases the lock


def reset_after_fork(volume: _Resettable) -> None:
    """Rebuild `volume`'s thread locks and pools in a forked child (its threads are gone)."""
    _volumes.add(volume)
