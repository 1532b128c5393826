"""A replica's job step, named after its launch: how Slurm (`squeue -s`, `sacct`) sees the
replica the node agent runs. It lives as long as the replica and ends with its exit code.

Side effects: none but waiting (reads the launch's records on this node).
"""

from __future__ import annotations

import os
import sys
import time

from perdure import statedir
from perdure.backends.agents.nodedir import node_dir
from perdure.backends.node import procs

START_SECONDS = 120.0  # the agent writes the launch (and a supervisor claims it) within this


def wait(directory: str) -> int:
    """The replica's exit code once it has ended (1 when it never started)."""
    began, held = time.monotonic(), None
    while (claim := statedir.read_json(os.path.join(directory, statedir.CLAIM))) is None:
        unstarted = statedir.read_json(os.path.join(directory, statedir.EXIT))
        if unstarted is not None:
            return int(unstarted.get("exit_code", 1)) & 0xFF
        if held is None:  # how long the node's check may hold it, once the agent wrote it
            record = statedir.read_json(os.path.join(directory, statedir.LAUNCH))
            held = None if record is None else float(record.get("preflight_timeout") or 0)
        if time.monotonic() - began >= START_SECONDS + (held or 0.0):
            return 1
        time.sleep(0.1)
    pid = int(claim.get("supervisor_pid") or 0)
    if pid:
        procs.wait_gone(pid, int(claim.get("supervisor_start_ticks") or 0))
    record = statedir.read_json(os.path.join(directory, statedir.EXIT)) or {}
    return int(record.get("exit_code", 1)) & 0xFF


def main() -> None:
    node, launch_id = sys.argv[1], sys.argv[2]
    sys.exit(wait(os.path.join(node_dir(node), statedir.LAUNCHES, launch_id)))


if __name__ == "__main__":
    main()
