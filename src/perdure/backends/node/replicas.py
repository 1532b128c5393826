"""Act on a replica's processes from outside its supervisor: launch checks, chaos, cleanup."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

from perdure import statedir
from perdure.backends.base import LaunchError
from perdure.backends.node import procs
from perdure.backends.node.memory import remove_cgroup
from perdure.core.events import Launch
from perdure.runtime.ranks import rank_file


def check_launch(launch: Launch, nodes: set[str], inherit_env: bool) -> None:
    """Raise LaunchError, naming the problem, if `launch` cannot start as given."""
    what = f"replica {launch.replica} (launch {launch.launch_id!r})"
    lid = launch.launch_id
    if not lid or lid in (".", "..") or "/" in lid or "\0" in lid or len(lid) > 200:
        raise LaunchError(
            f"cannot launch {what}: a launch id must be a non-empty file name "
            "(no '/', at most 200 characters)"
        )
    if launch.node not in nodes:
        raise LaunchError(
            f"cannot launch {what} on node {launch.node!r}: the nodes are "
            f"{', '.join(sorted(nodes))}"
        )
    if launch.memory_mb is not None and launch.memory_mb <= 0:
        raise LaunchError(f"cannot launch {what}: memory_mb={launch.memory_mb} must be > 0")
    if not os.path.isdir(launch.cwd):
        raise LaunchError(
            f"cannot launch {what}: its working directory {launch.cwd} does not exist",
            user_error=True,
        )
    if not launch.command:
        raise LaunchError(f"cannot launch {what}: its command is empty")
    _check_executable(what, launch, inherit_env)


def _check_executable(what: str, launch: Launch, inherit_env: bool) -> None:
    exe = launch.command[0]
    if os.sep in exe:
        path = os.path.join(launch.cwd, exe)  # an absolute `exe` replaces cwd
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return
        problem = "does not exist" if not os.path.exists(path) else "is not executable"
        raise LaunchError(
            f"cannot launch {what}: the command's executable {path} {problem}; "
            "check the pool's `command` and the job's workdir",
            user_error=True,
        )
    # The supervisor execs with the replica's environment, so look up its PATH.
    path_var = launch.env.get("PATH", os.environ.get("PATH") if inherit_env else None)
    search = os.pathsep.join(os.get_exec_path({} if path_var is None else {"PATH": path_var}))
    if shutil.which(exe, path=search) is None:
        raise LaunchError(
            f"cannot launch {what}: the command's executable {exe!r} is not on its "
            f"PATH ({search}); check the pool's `command` or give the full path",
            user_error=True,
        )


def signal_replica(state_dir: Path | str, launch_id: str, sig: int) -> int:
    """Send `sig` to a replica's own process from any process; its pid, or
    ProcessLookupError when it is not running."""
    directory = statedir.launch_dir(os.path.realpath(state_dir), launch_id)
    status_path = os.path.join(directory, statedir.STATUS)
    status = statedir.read_json(status_path)
    if status is None:
        raise ProcessLookupError(
            f"replica of launch {launch_id} has not started ({status_path} does not exist); "
            "check the launch id with `perdure describe`"
        )
    pid = int(status["pid"])
    if os.path.exists(os.path.join(directory, statedir.EXIT)) or not procs.send_signal(
        pid, int(status["start_ticks"]), sig
    ):
        raise ProcessLookupError(f"replica of launch {launch_id} (pid {pid}) has already exited")
    return pid


def kill_leftovers(status: dict[str, Any], directory: str) -> None:
    """After a supervisor died: kill what its replica left (its sessions, and its cgroup or,
    without one, what carries its error-file variable)."""
    ranks = status.get("ranks") or (
        [{"pid": status["pid"], "start_ticks": status["start_ticks"]}] if "pid" in status else [])
    for rank, proc in enumerate(ranks):  # each local rank leads a session of its own
        since = int(proc["start_ticks"])
        entry = None  # a cgroup holds what left the session
        if not isinstance(status.get("cgroup"), str):
            error_file = os.path.join(directory, rank_file(statedir.ERROR, rank))
            entry = os.fsencode(f"PERDURE_ERROR_FILE={error_file}")
        for member in procs.leftovers(int(proc["pid"]), since, entry):
            procs.send_signal(member.pid, member.start_ticks, signal.SIGKILL)
    cgroup = status.get("cgroup")
    if isinstance(cgroup, str):
        remove_cgroup(cgroup)
