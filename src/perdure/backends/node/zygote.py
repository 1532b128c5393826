"""The spawner: one warm process that forks a supervisor for each launch the backend sends it.

Starting a fresh interpreter for every supervisor costs CPU and delays every replica start
by as much; `LocalBackend` instead starts this process once, and `launch()` only writes
the launch directory to its stdin (one line per launch). The spawner has already imported the
supervisor, so each fork is a supervisor ready to run within a millisecond or two, in a session
of its own. It reaps the supervisors it forked; it exits when its stdin closes (the backend
closed or its controller died), and the supervisors it forked keep running.

It also keeps the pool of warm standby replicas (`pool`): a launch that can start warm goes
to a ready standby instead of a fresh supervisor. The line `+warm` starts filling the pool
before any launch needs it. Standbys not yet used exit with the spawner.

It watches its owner (the process that started it) as well: when the owner is gone it does
what end of input does, even if a descriptor of its stdin survives in another process, and
the template and standbys, which watch the same owner, exit with it.

Run as `python -c "from perdure.backends.node.zygote import main; main()" [POOL_SIZE
[IDLE_SECONDS [OWNER_PID]]]`.
"""

from __future__ import annotations

import os
import select
import sys

from perdure.backends.node import procs, supervisor, warm
from perdure.backends.node.pool import Pool

REAP_SECONDS = 0.2
PREWARM = b"+warm"


def main() -> None:
    """Fork a supervisor for every launch directory read from stdin, until end of input."""
    args = sys.argv[1:]
    warm.watch_owner(int(args[2]) if len(args) > 2 else os.getppid())
    pool = Pool(warm.pool_size(args[0] if args else None), os.getcwd(),
                warm.idle_seconds(args[1] if len(args) > 1 else None))
    buffered = b""
    while True:
        ready, _, _ = select.select([0, *pool.fds(), *warm.owner_fds()], [], [], REAP_SECONDS)
        procs.reap_children()
        if warm.owner_gone(ready):
            ready = [0]  # as at end of input: start what was sent, then exit
        cold = pool.due()
        for fd in ready:
            if fd != 0 and fd not in warm.owner_fds():
                cold += pool.handle(fd)
        for directory in cold:  # held for a standby that did not come in time
            _fork_supervisor(directory, pool)
        if 0 not in ready:
            continue
        chunk = b"" if warm.owner_gone() else os.read(0, 65536)
        if not chunk:
            for directory in pool.held_directories():  # start what it was sent, then exit
                _fork_supervisor(directory, pool)
            return
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            line = line.strip()
            if line == PREWARM:
                pool.activate()
            elif line and not pool.take(os.fsdecode(line)):
                _fork_supervisor(os.fsdecode(line), pool)


def _fork_supervisor(directory: str, pool: Pool) -> None:
    def supervise() -> int:
        # A supervisor in a session of its own, not reading the spawner's stdin.
        pool.close_in_child()  # a standby must see the spawner's exit as end of input
        os.setsid()
        procs.stdin_from_devnull()
        return supervisor.main([directory])

    procs.fork_child(supervise)


if __name__ == "__main__":
    main()
