"""Let torch's native threads settle before the interpreter finalizes.

A gloo thread that frees tensors needs the GIL; if the main thread has reached interpreter
finalization, CPython ends that thread with `pthread_exit`, whose unwind through gloo's
noexcept destructor calls `std::terminate` (SIGABRT after the script finished), and the same
race can hang `destroy_process_group()`. So at exit, and before destroy_process_group, the main
thread sleeps in short steps (releasing the GIL) until no other thread is runnable.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

SETTLE_SECONDS = 0.5
# Shorter mid-run (an elastic rebuild), where perdure's own threads may stay runnable.
DESTROY_SETTLE_SECONDS = 0.1
STEP_SECONDS = 0.005
_installed: list[bool] = []


def install() -> None:
    """Settle native threads at exit and before destroy_process_group (idempotent)."""
    if not _installed:
        _installed.append(True)
        atexit.register(settle)
    _guard_destroy()


def _guard_destroy() -> None:
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    dist = sys.modules.get("torch.distributed")
    original = getattr(c10d, "destroy_process_group", None)
    if c10d is None or dist is None or original is None or hasattr(original, "_perdure_settles"):
        return

    def destroy_process_group(*args: object, **kwargs: object) -> object:
        settle(DESTROY_SETTLE_SECONDS)
        return original(*args, **kwargs)

    destroy_process_group.__doc__ = original.__doc__
    destroy_process_group._perdure_settles = True  # type: ignore[attr-defined]
    setattr(c10d, "destroy_process_group", destroy_process_group)  # noqa: B010
    if getattr(dist, "destroy_process_group", None) is original:
        setattr(dist, "destroy_process_group", destroy_process_group)  # noqa: B010


def settle(limit: float = SETTLE_SECONDS) -> bool:
    """Sleep until no other thread is runnable (at most `limit` s); whether they settled."""
    if not _distributed_in_use():
        return True
    deadline = time.monotonic() + limit
    calm = 0
    while calm < 2:
        time.sleep(STEP_SECONDS)  # releases the GIL to whichever thread waits for it
        calm = 0 if _others_runnable() else calm + 1
        if time.monotonic() >= deadline:
            return calm > 0
    return True


def _distributed_in_use() -> bool:
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # a half-torn-down torch at exit: nothing to wait for
        return False


def _others_runnable() -> bool:
    """Whether a thread of this process other than the caller is running or runnable."""
    me = threading.get_native_id()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:  # not Linux: nothing to look at, a fixed short wait was enough
        return False
    for tid in tids:
        if tid == str(me):
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # exited meanwhile
            continue
        state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
        if state in (b"R", b"D"):
            return True
    return False
