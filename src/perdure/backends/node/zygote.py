"""The spawner: one warm process that forks a supervisor for each launch the backend sends it.

The backend writes each launch directory to its stdin, a line each (`+warm` fills the pool);
a launch that can start warm goes to a standby of its pool (`pool`). It exits when its stdin
closes or its owner is gone, having started what it was sent.
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
    args = sys.argv[1:]
    warm.watch_owner(int(args[2]) if len(args) > 2 else os.getppid())
    pool = Pool(warm.pool_size(args[0] if args else None), os.getcwd(),
                warm.idle_seconds(args[1] if len(args) > 1 else None))
    buffered = b""
    while True:
        pool.write_status()
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
            for directory in pool.release_held():  # start what it was sent, then exit
                _fork_supervisor(directory, pool)
            pool.write_status()
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
        pool.close_in_child()  # a standby must see the spawner's exit as end of input
        os.setsid()
        return supervisor.main([directory])

    procs.fork_child(supervise)
