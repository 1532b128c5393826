"""The local ranks of one replica as its supervisor owns them: environments, exits, reaping."""

from __future__ import annotations

import os
import sys
from typing import Any

from perdure import statedir
from perdure.backends.node import procs
from perdure.integrations.autoinstall import with_boot
from perdure.runtime.ranks import local_rank_env, rank_file

RANK_STOP_GRACE_SECONDS = 5.0  # the other local ranks of a replica one of whose ranks failed


def child_env(spec: dict[str, Any], directory: str, local_rank: int = 0) -> dict[str, str]:
    """The environment of local rank `local_rank` of the launch record `spec`."""
    env = dict(os.environ) if spec.get("inherit_env", True) else {}
    env.update(local_rank_env(spec["env"], local_rank))
    error_file = os.path.join(directory, rank_file(statedir.ERROR, local_rank))
    env["PERDURE_ERROR_FILE"] = error_file
    env["TORCHELASTIC_ERROR_FILE"] = error_file  # torchelastic's own @record writes here
    # Written before any stop signal: the runtime reads it to tell a notice from a plain stop.
    env["PERDURE_STOP_FILE"] = os.path.join(directory, statedir.STOP)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["PATH"] = python_first(env.get("PATH", ""), spec["command"][0])
    env["PYTHONPATH"] = with_boot(env.get("PYTHONPATH", ""))
    return env


def python_first(path: str, program: str) -> str:
    """PATH with the directory of perdure's interpreter first, so that `python` in a wrapper
    (`bash -c "... python train.py"`) is the interpreter a bare `python` command gets."""
    named = os.path.isabs(program) and os.path.basename(program).startswith("python")
    first = os.path.dirname(program if named else sys.executable)
    parts = path.split(os.pathsep) if path else []
    if not first or parts[:1] == [first]:
        return path
    return os.pathsep.join([first, *(p for p in parts if p != first)])


def records(pids: list[int]) -> list[dict[str, int]]:
    out = []
    for pid in pids:
        child = procs.stat(pid)
        out.append({"pid": pid, "start_ticks": child.start_ticks if child else 0})
    return out


def poll(pids: list[int]) -> tuple[int, list[tuple[int, int]]]:
    """How many ranks still run, and (local rank, wait status) of each that failed: those a
    signal killed first (the cause; a peer's exit on the broken collective is collateral).
    Exited ranks stay zombies (WNOWAIT): their pids and groups hold."""
    flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
    running, failures = 0, []
    for rank, pid in enumerate(pids):
        info = os.waitid(os.P_PID, pid, flags)
        if info is None:
            running += 1
        elif not (info.si_code == os.CLD_EXITED and info.si_status == 0):
            failures.append((info.si_code == os.CLD_EXITED, rank, info.si_status))
    return running, [(rank, status) for _, rank, status in sorted(failures)]


def killed(pids: list[int], rank: int) -> bool:
    """Whether local rank `rank` (exited, not reaped) died of a signal."""
    info = os.waitid(os.P_PID, pids[rank], os.WEXITED | os.WNOHANG | os.WNOWAIT)
    return info is not None and info.si_code != os.CLD_EXITED


def reap_orphans(pids: list[int]) -> None:
    """Reap the ended orphans a subreaper inherits; the ranks themselves stay for `reap`."""
    while True:
        try:
            found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if found is None or found.si_pid in pids:
            return
        os.waitpid(found.si_pid, 0)


def reap(pids: list[int]) -> tuple[list[int], int]:
    """Wait for every rank: their wait statuses by local rank and the largest ru_maxrss."""
    statuses, maxrss = [], 0
    for pid in pids:
        _, status, usage = os.wait4(pid, 0)
        statuses.append(status)
        maxrss = max(maxrss, usage.ru_maxrss)
    return statuses, maxrss
