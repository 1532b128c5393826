"""A warm standby interpreter: import torch now, run a replica's script later as if started cold.

Started by a standby supervisor (see `warm`) with stdin a pipe from it and fd 3 a pipe back:
it imports PRELOAD, says ready on fd 3 and reads its launch as JSON from stdin (nothing: exit).
It then runs the script in `__main__` with the sys.argv, sys.path[0] and exit status of
`python SCRIPT ...` or `python -m MODULE ...`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from types import TracebackType
from typing import Any

READY_FD = 3
# What a training script imports that costs seconds, beside compat.WARM_IMPORTS (torch's); a
# module that fails to import is skipped.
PRELOAD = ("numpy", "perdure.runtime.context", "perdure.runtime.checkpoint.checkpointer",
           "perdure.runtime.data", "perdure.runtime.elastic", "perdure.runtime.goodput",
           "perdure.runtime.rng", "perdure.runtime.vote")


def main() -> None:
    niced = lower_priority()
    preload()
    sys.exit(run_forked(niced))


def run_forked(niced: int | None = None) -> int:
    """Say ready, run the launch (first putting back the priority `niced`), and return the
    exit status the interpreter would exit with, having done what it does at exit."""
    main = sys.modules["__main__"]  # the forking process's: give the script one of its own
    fresh = type(main)("__main__")
    fresh.__dict__.update({k: v for k, v in main.__dict__.items() if k.startswith("__")})
    sys.modules["__main__"] = fresh
    launch = _await_launch()
    if launch is None:
        return 0
    if niced is not None:
        restore_priority(niced)
    _start(launch)
    code = 0
    try:
        _run(launch["target"], list(launch["args"]))
    except SystemExit as stop:
        code = _status(stop)
    except KeyboardInterrupt as interrupt:  # printed, then die of it, as the interpreter does
        _report(interrupt)
        _at_exit()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException as exc:  # reported as the interpreter would
        _report(exc)
        code = 1
    _at_exit()
    return code


def _await_launch() -> dict[str, Any] | None:
    os.write(READY_FD, b"R")
    os.close(READY_FD)
    chunks = []
    while chunk := os.read(0, 65536):
        chunks.append(chunk)
    return json.loads(b"".join(chunks)) if chunks else None


def _start(launch: dict[str, Any]) -> None:
    """Become the replica, with the exit guard, start-up hook and title a cold start has."""
    _become(launch)
    from perdure.backends.node.proctitle import set_title
    from perdure.integrations import autoinstall
    from perdure.runtime import exitguard

    exitguard.install()
    autoinstall.install()

    kind, name = launch["target"]
    set_title([sys.executable, *(["-m", name] if kind == "module" else [name]),
               *launch["args"]])


def _status(stop: SystemExit) -> int:
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code & 0xFF
    print(stop.code, file=sys.stderr)
    return 1


def _at_exit() -> None:
    import atexit
    import threading

    try:
        getattr(threading, "_shutdown")()  # noqa: B009 - what the interpreter calls at exit
    finally:
        getattr(atexit, "_run_exitfuncs")()  # noqa: B009
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                continue


def lower_priority() -> int | None:
    """Warm at the lowest CPU priority (running replicas need the CPU more) when it can be put
    back later (root, or RLIMIT_NICE); the priority to put back, or None."""
    import resource

    current = os.getpriority(os.PRIO_PROCESS, 0)
    soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
    allowed = soft == resource.RLIM_INFINITY or 20 - soft <= current
    if not (os.geteuid() == 0 or allowed):
        return None
    os.setpriority(os.PRIO_PROCESS, 0, 19)
    return current


def restore_priority(value: int) -> None:
    # Linux keeps a priority per thread: put it back on every thread, including those torch
    # started while it was imported at the lowest.
    for tid in os.listdir("/proc/self/task"):
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), value)
        except (PermissionError, ProcessLookupError):
            continue


def preload() -> None:
    try:
        from perdure.runtime import compat  # imports torch
    except Exception:  # no usable torch: the script will say so itself
        return
    compat.preload((*compat.WARM_IMPORTS, *PRELOAD))
    try:  # scripts join their process group as soon as rank 0 listens (envstore)
        from perdure.runtime import envstore

        envstore.install()
    except ImportError:  # torch without torch.distributed
        return


def _become(launch: dict[str, Any]) -> None:
    os.environ.clear()  # os.environ's setters also update the C environment (putenv/unsetenv)
    os.environ.update(launch["env"])
    os.chdir(launch["cwd"])
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(launch["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    err = os.open(launch["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    torch = sys.modules.get("torch")
    threads = launch["env"].get("OMP_NUM_THREADS", "")
    # torch read OMP_NUM_THREADS when it was imported, from the standby's environment (which
    # has none): apply the launch's value as a cold start would have read it.
    if torch is not None and threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


def _run(target: list[str], args: list[str]) -> None:
    kind, name = target
    if kind == "module":
        import runpy

        sys.argv = ["-m", *args]
        sys.path[0] = os.getcwd()
        # What `python -m` itself calls: the module runs in this __main__, argv[0] its file.
        getattr(runpy, "_run_module_as_main")(name, True)  # noqa: B009 - private, not typed
        return
    path = os.path.abspath(name)
    sys.argv = [name, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    main = sys.modules["__main__"]
    from importlib.machinery import SourceFileLoader

    main.__file__ = path
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__loader__ = SourceFileLoader("__main__", path)
    with open(path, "rb") as f:  # bytes: compile honours the file's coding cookie
        source = f.read()
    code = compile(source, path, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def _report(exc: BaseException) -> None:
    """Print `exc` through sys.excepthook from the script's first frame on, as Python would."""
    tb = _script_frames(exc.__traceback__)
    exc.with_traceback(tb)  # Python's excepthook prints the exception's own, not `tb`
    try:
        sys.excepthook(type(exc), exc, tb)
    except BaseException as hook_error:  # Python's own fallback
        print("Error in sys.excepthook:", file=sys.stderr)
        sys.__excepthook__(type(hook_error), hook_error, hook_error.__traceback__)
        print("\nOriginal exception was:", file=sys.stderr)
        sys.__excepthook__(type(exc), exc, tb)
    sys.stderr.flush()


def _script_frames(tb: TracebackType | None) -> TracebackType | None:
    # Drop this module's frames only: a cold `python -m` shows runpy's frames too.
    ours = os.path.abspath(__file__)
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == ours:
        tb = tb.tb_next
    return tb
