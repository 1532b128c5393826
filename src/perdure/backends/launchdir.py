"""A launch's directory on its node as a node agent drives it: the supervisor's launch
record, a stop, and the end of a launch that never started or left no exit record.

Side effects: files in the launch directory, signals to its supervisor and what it left.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from perdure import statedir
from perdure.backends.node import procs
from perdure.backends.node.replicas import kill_leftovers
from perdure.core.events import Launch


def identity(pid: int) -> dict[str, int]:
    """A process as pid and start time (a pid alone may be reused)."""
    own = procs.stat(pid)
    return {"pid": pid, "start_ticks": own.start_ticks if own else 0}


def launch_record(launch: Launch, env: dict[str, str], log_max_bytes: int) -> dict[str, Any]:
    """What a cluster backend sends its node of a launch, `env` as the replica gets it."""
    return {"launch_id": launch.launch_id, "job_id": launch.job_id, "replica": launch.replica,
            "node": launch.node, "command": list(launch.command), "env": env,
            "cwd": launch.cwd, "memory_mb": launch.memory_mb, "gpus": launch.gpus,
            "log_max_bytes": log_max_bytes}


def write_launch(directory: str, record: dict[str, Any], command: list[str],
                 env: dict[str, str], owner: dict[str, int], **more: Any) -> None:
    """The supervisor's launch record for `record` as the controller sent it, run with
    `command` and `env` (over the node's environment), its streams in `directory`."""
    statedir.write_json(os.path.join(directory, statedir.LAUNCH), {
        **record, "command": command, "env": env, "inherit_env": True,
        "memory_mechanism": record.get("memory_mechanism", "auto"),
        "stdout": os.path.join(directory, statedir.STREAMS["out"]),
        "stderr": os.path.join(directory, statedir.STREAMS["err"]),
        "output": os.path.join(directory, statedir.STREAMS["log"]),  # both, in order
        "created": time.time(), "owner": owner, **more})


def stop(directory: str, sig: int, grace: float, reason: str, notice: Any,
         delay: float = 0.0) -> None:
    """Write the stop request (the supervisor and the runtime read it) and tell the
    supervisor; one that has not started the replica yet reads it when it does."""
    statedir.write_json(os.path.join(directory, statedir.STOP),
                        statedir.stop_record(sig, grace, reason, notice, delay))
    status = statedir.read_json(os.path.join(directory, statedir.STATUS))
    if status is not None:
        procs.send_signal(int(status["supervisor_pid"]), int(status["supervisor_start_ticks"]),
                          signal.SIGUSR1)


def end_unstarted(directory: str, sig: int, reason: str) -> None:
    """A launch held by its node's check was stopped: it ends without having started."""
    statedir.write_json(os.path.join(directory, statedir.EXIT), {
        "exit_code": 128 + sig, "signal": sig, "time": time.time(),
        "unstarted": f"stopped ({reason}) while held by the node's check"})


def supervisor_lost(directory: str, where: str, code: str = "") -> dict[str, Any]:
    """The exit record of a launch whose supervisor exited (`code`) without writing one; what
    its replica left is killed."""
    kill_leftovers(statedir.read_json(os.path.join(directory, statedir.STATUS)) or {},
                   directory)
    return {"spawn_error": f"the supervisor of launch {os.path.basename(directory)} exited"
                           f"{code} without recording the replica's exit; see "
                           f"{os.path.join(directory, statedir.SUPERVISOR_LOG)} on {where}",
            "time": time.time()}
