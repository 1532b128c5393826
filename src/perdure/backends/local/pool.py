"""The spawner's pool of warm standby replicas (see `warm`): fill, hand out, refill.

Lives in the spawner process (`zygote`). The pool stays empty until a launch could use a
standby (its command is `python SCRIPT ...` or `python -m MODULE ...`) or the backend asks
for it (`LocalBackend.prewarm`): a job of `python -c` replicas never pays for importing torch
in the background. From then on it keeps `size` standbys, each forked here and warming on its
own (a few seconds of CPU), replaced REFILL_QUIET seconds after the last launch; a launch
takes a ready one or, when none is ready, starts cold at once. Nothing here waits for a
standby. Its state is written to `.warm.json` in the launches directory for tests,
benchmarks and `LocalBackend.warm_pool_status`.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback

from perdure.backends.local import layout, supervisor, warm

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STATUS_FILE = ".warm.json"
# Launches that can start warm arriving within this many seconds of each other are one group.
GROUP_GAP = 2.0
# Standbys used up are replaced once no launch has come for this long: importing torch costs
# seconds of CPU, which the replicas just started (rendezvous, restore) need more.
REFILL_QUIET = 3.0
# Standbys that die before they are ready, in a row, before the pool gives up (torch that
# cannot be imported, say): it must not burn the CPU forever.
MAX_FAILURES = 3


class _Slot:
    __slots__ = ("link", "pid", "ready")

    def __init__(self, link: socket.socket, pid: int) -> None:
        self.link = link
        self.pid = pid
        self.ready = False


class Pool:
    """Up to `size` standbys, started on first need and refilled as they are used.

    With `size` "auto" the pool keeps at least `warm.DEFAULT_POOL` and grows to the largest
    group of warm-eligible launches it has seen (up to `warm.AUTO_MAX`), so that a group
    restart of a job finds every one of its replicas a standby.
    """

    def __init__(self, size: int | str, launches_dir: str) -> None:
        self.auto = size == warm.AUTO
        self.size = warm.DEFAULT_POOL if isinstance(size, str) else size
        self._group = 0  # eligible launches in the current group
        self._group_last = 0.0
        self._refill_at: float | None = None
        self.status_path = os.path.join(launches_dir, STATUS_FILE)
        self.env = warm.standby_env(dict(os.environ))
        self.active = False
        self.slots: dict[int, _Slot] = {}
        self.failures = 0
        self.disabled = "" if self.size > 0 else f"the pool size is 0 (${warm.POOL_ENV})"
        self.used = 0
        self._write_status()

    def fds(self) -> list[int]:
        """The standbys' sockets, to select on (readable: ready, or gone)."""
        return list(self.slots)

    def activate(self) -> None:
        """Start keeping `size` standbys now (idempotent)."""
        self.active = True
        self._refill_at = None
        self.refill()

    def handle(self, fd: int) -> None:
        """A standby's socket is readable: it is ready, or it exited."""
        slot = self.slots[fd]
        try:
            data = slot.link.recv(16)
        except OSError:
            data = b""
        if data:
            slot.ready, self.failures = True, 0
        else:
            del self.slots[fd]
            slot.link.close()
            if not slot.ready:
                self.failures += 1
                if self.failures >= MAX_FAILURES:
                    self.disabled = (
                        f"{self.failures} standbys in a row exited before they were ready; "
                        f"see {os.path.join(os.path.dirname(self.status_path), layout.EARLY_LOG)}"
                    )
                    print(f"warm pool: turned off: {self.disabled}", file=sys.stderr)
            self.refill()
        self._write_status()

    def take(self, directory: str) -> bool:
        """Hand `directory` to a ready standby if its launch can start warm; whether it did."""
        if not self.disabled and self._eligible(directory):
            self.active = True
            self._grow()
            for fd, slot in list(self.slots.items()):
                if slot.ready:
                    del self.slots[fd]
                    try:
                        slot.link.sendall(os.fsencode(directory) + b"\n")
                    except OSError:
                        continue  # it died just now: try the next one
                    finally:
                        slot.link.close()
                    self.used += 1
                    self._refill_later()
                    return True
            self._refill_later()
        return False

    def _refill_later(self) -> None:
        self._refill_at = time.monotonic() + REFILL_QUIET
        self._write_status()

    def due(self) -> None:
        """Refill if the quiet period after the last launch is over (called every loop)."""
        if self._refill_at is not None and time.monotonic() >= self._refill_at:
            self._refill_at = None
            self.refill()

    def _grow(self) -> None:
        now = time.monotonic()
        self._group = self._group + 1 if now - self._group_last <= GROUP_GAP else 1
        self._group_last = now
        if self.auto and self._group > self.size:
            self.size = min(self._group, warm.AUTO_MAX)

    def _eligible(self, directory: str) -> bool:
        spec = layout.read_json(os.path.join(directory, layout.LAUNCH))
        if spec is None:
            return False  # the supervisor will report it
        child = supervisor.child_env(spec, directory)
        return warm.launch_fits(list(spec["command"]), str(spec["cwd"]), child, self.env)

    def refill(self) -> None:
        """Fork standbys until there are `size` (ready or warming); never waits for one."""
        while self.active and not self.disabled and len(self.slots) < self.size:
            self._fork()
        self._write_status()

    def _fork(self) -> None:
        ours, theirs = socket.socketpair()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child, a standby supervisor
            code = 1
            try:
                self.close_in_child()
                ours.close()
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)  # not the spawner's launch pipe
                os.close(null)
                code = warm.run_standby(theirs)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        theirs.close()
        self.slots[ours.fileno()] = _Slot(ours, pid)

    def close_in_child(self) -> None:
        """In a process forked from the spawner: let go of every standby's socket."""
        for slot in self.slots.values():
            slot.link.close()
        self.slots.clear()

    def _write_status(self) -> None:
        ready = sum(slot.ready for slot in self.slots.values())
        status: dict[str, Any] = {
            "size": self.size,
            "auto": self.auto,
            "active": self.active,
            "ready": ready,
            "warming": len(self.slots) - ready,
            "used": self.used,
            "disabled": self.disabled or None,
            "spawner_pid": os.getpid(),
        }
        try:
            layout.write_json(self.status_path, status)
        except OSError:
            return  # the launches directory is gone (a test cleaned up): nothing to tell
