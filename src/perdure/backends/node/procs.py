"""Process helpers: identity that survives pid reuse, signals, RSS, fork and exec.

A process is (pid, start ticks since boot), so a signal never reaches a stranger that reused
the pid. Linux only: /proc is read directly (the supervisor cannot afford psutil's import).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# What a supervisor handles itself (blocked, then waited for); a standby's child resets them.
SUPERVISOR_SIGNALS = {signal.SIGCHLD, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT,
                      signal.SIGHUP}


class ProcStat(NamedTuple):
    """What /proc/<pid>/stat says about a process."""

    pid: int
    state: str  # R, S, D, Z (zombie), ...
    sid: int
    start_ticks: int

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X", "x")


def stat(pid: int) -> ProcStat | None:
    """The process `pid`, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces and parentheses.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return ProcStat(pid, fields[0].decode(), int(fields[3]), int(fields[19]))


def is_alive(pid: int, start_ticks: int) -> bool:
    """Whether the process that had `start_ticks` still runs (a zombie counts as gone)."""
    info = stat(pid)
    return info is not None and info.start_ticks == start_ticks and info.alive


def pidfd(pid: int) -> int:
    """A pidfd of `pid` (the caller closes it); -1 when it is gone or pidfds are missing."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


def wait_gone(pid: int, start_ticks: int, timeout: float | None = None) -> bool:
    """Block until the process that had `start_ticks` is gone (True) or `timeout` s pass
    (False); any process, not only a child."""
    import select

    deadline = None if timeout is None else time.monotonic() + timeout
    fd = pidfd(pid)
    try:
        while is_alive(pid, start_ticks):  # checked with the pidfd open: no pid reuse race
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            if fd >= 0:
                select.select([fd], [], [], left)
            else:
                time.sleep(0.05 if left is None else min(0.05, left))
        return True
    finally:
        if fd >= 0:
            os.close(fd)


def create_time(start_ticks: int) -> float:
    """The wall-clock time a process started, from its start ticks (as psutil reports it)."""
    return _boot_time() + start_ticks / os.sysconf("SC_CLK_TCK")


def _boot_time() -> float:
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


def send_signal(pid: int, start_ticks: int, sig: int) -> bool:
    """Signal the process (pid, start_ticks); False when it is gone or the pid was reused."""
    fd = pidfd(pid)
    try:
        if not is_alive(pid, start_ticks):
            return False
        if fd >= 0:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        if fd >= 0:
            os.close(fd)


def kill_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when the group is empty."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):  # a zombie-only group: EPERM on some kernels
        return False


def tree(pid: int) -> list[int]:
    """`pid` and all its live descendants (through /proc/<pid>/task/*/children)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(_children(current))
    return found


def _children(pid: int) -> Iterator[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                yield from (int(c) for c in f.read().split())
        except OSError:
            continue


def kill_descendants(pid: int, timeout: float = 2.0) -> None:
    """SIGKILL every live descendant of `pid` (a subreaper) until none is left, for at most
    `timeout` (a fork bomb); they stay zombies for the caller to reap."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in tree(pid)[1:] if (info := stat(p)) is not None and info.alive]
        if not alive:
            return
        for victim in alive:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                continue
        time.sleep(0.005)  # let them die; an orphan of theirs comes back to us meanwhile


def rss_bytes(pids: list[int]) -> int:
    """The summed resident set size of `pids` (shared pages count once per process)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


def leftovers(sid: int, min_start_ticks: int, entry: bytes | None = None) -> list[ProcStat]:
    """Live processes started no earlier than `min_start_ticks` in session `sid` or, with
    `entry` (b"NAME=value"), with it in their environment: what a replica left."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        info = stat(int(name))
        if info is None or not info.alive or info.start_ticks < min_start_ticks:
            continue
        if info.sid != sid and entry is not None:
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if entry not in f.read().split(b"\0"):
                        continue
            except OSError:  # gone, or another user's
                continue
        if info.sid == sid or entry is not None:
            found.append(info)
    return found


_libc: list[ctypes.CDLL] = []


def fork_child(body: Callable[[], int]) -> int:
    """Fork a child, stdin /dev/null, that exits with `body()`'s status; its pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid != 0:
        return pid
    code = 1  # pragma: no cover - the child
    try:
        null = os.open(os.devnull, os.O_RDONLY)  # not the parent's launch pipe
        os.dup2(null, 0)
        os.close(null)
        code = body()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def reap_children() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def load_libc() -> None:
    """Load libc for prctl now, so a forked child need not (call before forking)."""
    if not _libc:
        _libc.append(ctypes.CDLL(None, use_errno=True))


def _prctl(option: int, value: int) -> None:
    if not sys.platform.startswith("linux"):  # a Ray launch actor elsewhere
        return
    load_libc()
    libc = _libc[0]
    if libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}, {value}): {os.strerror(err)}")


def set_parent_death_signal(sig: int) -> None:
    _prctl(_PR_SET_PDEATHSIG, sig)


def set_child_subreaper() -> None:
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


class ExecError(OSError):
    """The child of `spawn` could not chdir or exec (not the supervisor's own failure)."""


def spawn(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    fds: tuple[int, int, int],
    in_child: Callable[[], None],
) -> int:
    """Start `argv` in a new session with stdin/stdout/stderr from `fds` (`in_child` runs
    just before exec); its pid, or ExecError. Not `subprocess`: its import is too slow."""
    read_end, write_end = os.pipe()  # close-on-exec: EOF tells the parent exec succeeded
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its failures come back through the pipe
        try:
            os.close(read_end)
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            os.chdir(cwd)
            # Python ignores these at start-up and ignored signals survive exec: restore them.
            for name in ("SIGPIPE", "SIGXFSZ"):
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            in_child()
            os.execvpe(argv[0], argv, env)
        except BaseException as err:  # report any failure, then never return into the parent
            code = err.errno if isinstance(err, OSError) and err.errno else 0
            os.write(write_end, f"{code}:{type(err).__name__}: {err}".encode(errors="replace"))
        finally:
            os._exit(127)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 4096):
        chunks.append(chunk)
    os.close(read_end)
    if chunks:
        os.waitpid(pid, 0)
        number, _, why = b"".join(chunks).decode(errors="replace").partition(":")
        failure = ExecError(why)  # its words as before; the errno beside them
        failure.errno = int(number) if number.isdigit() else 0
        raise failure
    return pid
