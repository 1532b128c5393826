"""A replica's job step: `srun ... python -m perdure.backends.slurm.step NODE LAUNCH_ID`.

The node agent runs the replica (under its spawner, warm when it can); this step is how Slurm
sees it: a step named after the launch that lives as long as the replica and ends with its
exit code, so `squeue -s` and `sacct` show replicas, and a restarted controller finds the
launches still running by their steps' names. Imports only what a supervisor imports.

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
    """The replica's exit code once it has ended (1 when it never started; a launch held by
    the node's check and stopped there ends with the signal that stopped it)."""
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
