"""Report a replica's uncaught exception to perdure: decorate `main` with `record`.

`perdure.init()` installs the same reporting as an excepthook; `record` is for scripts that
want it without `init()`. Only the standard library is imported.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import ParamSpec, TypeVar

from perdure import statedir
from perdure.runtime import transport
from perdure.runtime.errorfile import MAX_MESSAGE_CHARS, MAX_TRACEBACK_CHARS, clip

__all__ = ["install_excepthook", "record", "write_error_file"]

P = ParamSpec("P")
R = TypeVar("R")

# `record` and the excepthook can both see one exception: mark it so it is written once.
_MARK = "_perdure_error_file_written"
_hook_lock = threading.Lock()
_hook_installed = False


def record(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a script's entry point so an uncaught exception is written to the error file.

    The exception is re-raised unchanged. `SystemExit` is not recorded: it is a deliberate exit.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except SystemExit:
            raise
        except BaseException as exc:
            write_error_file(exc)
            raise

    return wrapper


def install_excepthook() -> None:
    """Write the error file for an uncaught exception in any thread, then call the hooks
    installed before (idempotent)."""
    global _hook_installed
    with _hook_lock:
        if _hook_installed:
            return
        _hook_installed = True
        previous = sys.excepthook
        previous_thread = threading.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if not issubclass(exc_type, SystemExit):
            write_error_file(exc)
        previous(exc_type, exc, tb)

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and not isinstance(args.exc_value, SystemExit):
            write_error_file(args.exc_value)
        previous_thread(args)

    sys.excepthook = hook
    threading.excepthook = thread_hook


def write_error_file(exc: BaseException, path: str | Path | None = None) -> Path | None:
    """Write `exc` to `path` (default: through this process's transport); return where it
    went, None if nowhere. Never raises: a failure to report is printed to stderr instead."""
    if getattr(exc, _MARK, False):
        return None
    target: str | Path | None = path
    try:
        # Clipped (head and tail): the file must fit any reader and the relay's frame cap
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        payload = {
            "type": type(exc).__name__,
            "message": clip(str(exc), MAX_MESSAGE_CHARS),
            "traceback": clip(trace, MAX_TRACEBACK_CHARS),
            "time": time.time(),
            "rank": _rank(),
            "pid": os.getpid(),
        }
        if path is not None:
            statedir.write_atomically(path, json.dumps(payload))
        else:
            target = transport.current().write_error(payload)
    except Exception as err:  # an exception whose __str__ fails, a full disk, ...
        print(f"perdure: could not write the error file {target or ''}: {err}",
              file=sys.stderr)
        return None
    if target is None:
        return None
    with contextlib.suppress(AttributeError):  # no __dict__: at worst written twice
        setattr(exc, _MARK, True)
    return Path(target)


def _rank() -> int | None:
    value = os.environ.get("RANK", "")
    return int(value) if value.isdigit() else None

