"""Warm standby replicas: a supervisor-to-be holding an interpreter that has imported torch.

A standby is a *standby supervisor* and its child interpreter (`warmstart`), warm and waiting.
Handed a launch directory, the standby supervisor becomes that launch's supervisor and its
child runs the script instead of fork + exec, so supervision and exit records are unchanged.
The *template*, one interpreter that imports torch once for the pool, forks each standby
(`$PERDURE_WARM_FORK=0`: each starts its own); it never touches CUDA, so its forks can.
"""

from __future__ import annotations

import os
import select
import signal
import socket

from perdure.backends.node import procs, warmstart
from perdure.backends.node.standby import Standby
from perdure.backends.settings import AUTO as AUTO  # warm.AUTO: the pool size "auto"
from perdure.backends.settings import count_or_auto

POOL_ENV = "PERDURE_WARM_POOL"
FORK_ENV = "PERDURE_WARM_FORK"
DEFAULT_POOL = 2
IDLE_ENV = "PERDURE_WARM_IDLE_SECONDS"
DEFAULT_IDLE_SECONDS = 600.0
AUTO_MAX = 8  # "auto": DEFAULT_POOL, grown to the largest group of launches seen together
# Each standby holds an interpreter with torch: a typo (100000) must not fork until the
# machine gives out.
MAX_POOL = 32
MAX_IDLE_SECONDS = 7 * 86400.0


def pool_size(value: int | str | None) -> int | str:
    """The pool size from an argument or `$PERDURE_WARM_POOL` (default "auto")."""
    size = count_or_auto(value, POOL_ENV, MAX_POOL, lambda raw: (
        f"warm pool size {raw!r} (argument or ${POOL_ENV}) must be an integer from 0 to "
        f"{MAX_POOL} or {AUTO!r} (grows to {AUTO_MAX}); 0 turns warm standby replicas off"))
    return AUTO if size is None else size


def idle_seconds(value: float | str | None) -> float:
    """How long the pool stays filled without a launch (`$PERDURE_WARM_IDLE_SECONDS`)."""
    raw = os.environ.get(IDLE_ENV, DEFAULT_IDLE_SECONDS) if value is None else value
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_IDLE_SECONDS:
        raise ValueError(
            f"warm pool idle time {raw!r} (argument or ${IDLE_ENV}) must be a number of "
            f"seconds > 0 and at most {MAX_IDLE_SECONDS:.0f} (a week): the pool empties "
            "after that long without a launch"
        )
    return seconds


# The spawner's owner as a pidfd, inherited by all the spawner forks: readable once the owner
# exited, even if a descriptor leaked into a surviving process keeps the spawner's pipe open.
_owner_fd = -1


def watch_owner(pid: int) -> None:
    global _owner_fd
    _owner_fd = procs.pidfd(pid)


def owner_fds() -> list[int]:
    return [_owner_fd] if _owner_fd >= 0 else []


def owner_gone(ready: list[int] | None = None) -> bool:
    """Whether the owner has exited (its pidfd is in `ready`, or readable now)."""
    if _owner_fd < 0:
        return False
    if ready is None:
        ready, _, _ = select.select([_owner_fd], [], [], 0)
    return _owner_fd in ready


def run_standby(link: socket.socket, forked: bool = False) -> int:
    """The standby supervisor: warm a child, say b"R" on `link`, serve the launch sent."""
    from perdure.backends.node import supervisor

    os.setsid()
    signal.pthread_sigmask(signal.SIG_BLOCK, procs.SUPERVISOR_SIGNALS)
    standby = Standby.fork([link.fileno()]) if forked else Standby.start()
    if not standby.wait_ready(link):
        print(f"warm standby {standby.pid}: its interpreter exited before it was ready")
        standby.dismiss()
        return 1
    link.sendall(b"R")
    directory = _read_directory(link, standby)
    link.close()
    if not directory:
        standby.dismiss()
        return 0
    return supervisor.serve(directory, standby)


def _read_directory(link: socket.socket, standby: Standby) -> str:
    """The launch directory the spawner sends; "" at EOF or if the child died."""
    pidfd = procs.pidfd(standby.pid)
    watched = [link.fileno(), *owner_fds()] + ([pidfd] if pidfd >= 0 else [])
    received = b""
    try:
        while not received.endswith(b"\n"):
            ready, _, _ = select.select(watched, [], [], 1.0)
            if (pidfd >= 0 and pidfd in ready) or owner_gone(ready) or not standby.alive():
                return ""
            if link.fileno() in ready:
                chunk = link.recv(4096)
                if not chunk:
                    return ""
                received += chunk
    finally:
        if pidfd >= 0:
            os.close(pidfd)
    return os.fsdecode(received.strip())


def serve_template(sock: socket.socket) -> int:
    """The template's life: warm, say ready, fork a standby per socket received, until EOF."""
    procs.load_libc()
    spawner = os.getppid()
    procs.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != spawner or owner_gone():  # it died before the signal was set
        return 0
    priority = warmstart.lower_priority()
    warmstart.preload()
    sock.sendall(b"R")
    while True:
        readable, _, _ = select.select([sock.fileno(), *owner_fds()], [], [], 0.5)
        procs.reap_children()
        if owner_gone(readable) or os.getppid() != spawner:
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
        return run_standby(socket.socket(fileno=fd), forked=True)

    procs.fork_child(standby)
    os.close(fd)
