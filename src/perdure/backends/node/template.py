"""The template: one interpreter that imports torch once; warm standbys are forked from it.

Importing torch costs seconds of CPU; the template pays it once for the pool instead of once
per standby (and per early replica, all at the same time). The spawner forks it when the pool
is first needed; it imports `warmstart.PRELOAD`, says ready, then forks a standby supervisor
for every socket the spawner sends it (SCM_RIGHTS), whose replica interpreter is forked from
it in turn (`Standby.fork`): ready within milliseconds. It runs no torch op and never touches
CUDA, so what it forks can, as a DataLoader worker can. `PERDURE_WARM_FORK=0` turns it off
(standbys then start interpreters of their own). It dies with the spawner and its owner.
"""

from __future__ import annotations

import os
import select
import signal
import socket

from perdure.backends.node import procs, warm, warmstart

FORK_ENV = "PERDURE_WARM_FORK"


def enabled() -> bool:
    """Whether standbys are forked from a template ($PERDURE_WARM_FORK, default on)."""
    return os.environ.get(FORK_ENV, "1") != "0"


def serve(sock: socket.socket) -> int:
    """The template's life: warm, say ready, fork a standby per socket received, until EOF."""
    procs.load_libc()
    spawner = os.getppid()
    procs.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != spawner or warm.owner_gone():  # it died before the signal was set
        return 0
    priority = warmstart.lower_priority()
    warmstart.preload()
    sock.sendall(b"R")
    while True:
        readable, _, _ = select.select([sock.fileno(), *warm.owner_fds()], [], [], 0.5)
        procs.reap_children()
        if warm.owner_gone(readable) or os.getppid() != spawner:
            return 0  # the pool never outlives its owner: fork nothing more
        if not readable:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(sock, 16, 8)
        except OSError:
            return 0
        if not message:
            return 0  # the spawner is gone
        for fd in fds:
            _fork_standby(fd, sock, priority)


def _fork_standby(fd: int, sock: socket.socket, priority: int | None) -> None:
    def standby() -> int:  # a standby supervisor whose replica is forked from it
        sock.close()
        if priority is not None:  # a supervisor must answer stops promptly
            warmstart.restore_priority(priority)
        return warm.run_standby(socket.socket(fileno=fd), forked=True)

    procs.fork_child(standby)
    os.close(fd)
