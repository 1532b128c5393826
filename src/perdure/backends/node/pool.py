"""The spawner's pool of warm standby replicas (see `warm`): fill, hand out, refill.

It stays empty until a launch could use a standby or the backend asks (`+warm`), so a job of
`python -c` replicas never imports torch in the background, and empties after `idle` seconds
without such a launch. Its state is in `.warm.json`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from perdure import statedir
from perdure.backends.node import localranks, procs, warm
from perdure.backends.node.standby import launch_fits, standby_env

# Launches that can start warm arriving within this many seconds of each other are one group.
GROUP_GAP = 2.0
# Standbys used up are replaced once no launch has come for this long: the replicas just
# started (rendezvous, restore) need the CPU more.
REFILL_QUIET = 3.0
HOLD_SECONDS = 30.0  # the longest a launch waits for the template rather than start cold
MAX_FAILURES = 3  # standbys dead before ready, in a row, before the pool turns itself off


def summary(state_dir: str | os.PathLike[str]) -> str | None:
    """One line on the state dir's warm pool, for `perdure node ls`; None if it had none."""
    status = statedir.read_json(os.path.join(state_dir, statedir.LAUNCHES, statedir.WARM_STATUS))
    if status is None:
        return None
    pid = status.get("spawner_pid")
    if not isinstance(pid, int) or procs.stat(pid) is None:
        return "warm pool: none (no controller is running)"
    idle = f"{float(status.get('idle_seconds') or warm.DEFAULT_IDLE_SECONDS):.0f} s"
    if status.get("disabled"):
        return f"warm pool: off ({status['disabled']})"
    if status.get("shrunk_at"):
        since = time.strftime("%H:%M:%S", time.localtime(float(status["shrunk_at"])))
        return (f"warm pool: empty since {since} (no launch for {idle}); refills at the next "
                "launch that can start warm")
    if not status.get("active"):
        return f"warm pool: empty until a launch can start warm (empties after {idle} idle)"
    return (f"warm pool: {status.get('ready', 0)} ready, {status.get('warming', 0)} warming of "
            f"{status.get('size')}, template {status.get('template')}; empties after {idle} "
            "without a launch")


class _Slot:
    """A standby supervisor or the template, and its socket: b"R" says ready, EOF exited."""

    __slots__ = ("link", "pid", "ready")

    def __init__(self, link: socket.socket, pid: int) -> None:
        self.link = link
        self.pid = pid  # 0: forked by the template
        self.ready = False

    def said_ready(self) -> bool:
        """Its socket is readable: True if it said ready, False if it is gone."""
        try:
            data = self.link.recv(16)
        except OSError:
            data = b""
        if data:
            self.ready = True
        return bool(data)


class Pool:
    """Up to `size` standbys, refilled as they are used; "auto" grows to the largest group of
    launches seen together (up to `warm.AUTO_MAX`), so a group restart finds one each."""

    def __init__(self, size: int | str, launches_dir: str,
                 idle: float = warm.DEFAULT_IDLE_SECONDS) -> None:
        self.auto = size == warm.AUTO
        self.size = warm.DEFAULT_POOL if isinstance(size, str) else size
        self._group = 0  # eligible launches in the current group
        self._group_last = 0.0
        self._refill_at: float | None = None
        self.template: _Slot | None = None
        self.template_failed = False
        self.held: list[tuple[str, float]] = []  # (launch directory, start it cold after)
        self.status_path = os.path.join(launches_dir, statedir.WARM_STATUS)
        self.env = standby_env(dict(os.environ))
        self.active = False
        self.slots: dict[int, _Slot] = {}
        self.failures = 0
        self.disabled = "" if self.size > 0 else f"the pool size is 0 (${warm.POOL_ENV})"
        self.used = 0
        self.idle = idle
        self._last_use = time.monotonic()
        self.shrunk_at: float | None = None  # wall clock, for `perdure node ls`
        self._written: dict[str, Any] | None = None
        self.write_status()

    def fds(self) -> list[int]:
        """The standbys' sockets and the template's, to select on."""
        return [*self.slots, *([self.template.link.fileno()] if self.template else [])]

    def activate(self) -> None:
        """Start keeping `size` standbys now (idempotent)."""
        self.active = True
        self._used_now()
        self._refill_at = None
        self._start_template()
        self.refill()

    def _start_template(self) -> None:
        if self.template is None and not self.template_failed and not self.disabled \
                and os.environ.get(warm.FORK_ENV, "1") != "0":
            self.template = self._forked(warm.serve_template)

    def handle(self, fd: int) -> list[str]:
        """A slot's socket is readable; launch directories to start cold."""
        if self.template is not None and fd == self.template.link.fileno():
            return self._template_event()
        slot = self.slots.get(fd)
        if slot is None:
            return []  # dropped earlier in this round (its template exited)
        if slot.said_ready():
            self.failures = 0
            self._serve_held()
        else:
            del self.slots[fd]
            slot.link.close()
            if not slot.ready:
                self.failures += 1
                if self.failures >= MAX_FAILURES:
                    self.disabled = (
                        f"{self.failures} standbys in a row exited before they were ready; "
                        f"see {os.path.join(os.path.dirname(self.status_path), statedir.EARLY_LOG)}"
                    )
                    print(f"warm pool: turned off: {self.disabled}", file=sys.stderr)
            self.refill()
        return self.release_held() if self.disabled else []

    def _template_event(self) -> list[str]:
        assert self.template is not None
        if self.template.said_ready():
            self.refill()  # standbys now, and for the held launches
            return []
        print("warm pool: the template exited; standbys start interpreters of their own",
              file=sys.stderr)
        self.template.link.close()
        self.template, self.template_failed = None, True
        # Slots asked of it that never came are lost with it: forget them.
        for fd, slot in list(self.slots.items()):
            if not slot.ready and slot.pid == 0:
                slot.link.close()
                del self.slots[fd]
        self.refill()
        return self.release_held()

    def _serve_held(self) -> None:
        served = False
        while self.held and self._hand(self.held[0][0]):
            self.held.pop(0)
            served = True
        if served:
            self._refill_later()

    def release_held(self) -> list[str]:
        """Every held launch, to start cold now."""
        out = [d for d, _ in self.held]
        self.held = []
        return out

    def take(self, directory: str) -> bool:
        """Hand `directory` to a ready standby, or hold it until one is; whether it took it."""
        if not self.disabled and self._eligible(directory):
            self.active = True
            self._used_now()
            self._grow()
            self._start_template()
            if self._hand(directory):
                self._refill_later()
                return True
            if self.template is not None:  # a standby within milliseconds of it being ready
                self.held.append((directory, time.monotonic() + HOLD_SECONDS))
                if self.template.ready:
                    self._fork()
                return True
            self._refill_later()
        return False

    def _hand(self, directory: str) -> bool:
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
                return True
        return False

    def _refill_later(self) -> None:
        self._refill_at = time.monotonic() + REFILL_QUIET

    def _used_now(self) -> None:
        self._last_use = time.monotonic()
        self.shrunk_at = None

    def shrink(self) -> None:
        """Let the template and every standby go (they exit); refilled at the next launch."""
        for slot in self.slots.values():
            slot.link.close()  # a standby supervisor at end of input dismisses its child
        self.slots.clear()
        if self.template is not None:
            self.template.link.close()
            with contextlib.suppress(ProcessLookupError):  # it may be importing torch still
                os.kill(self.template.pid, signal.SIGKILL)
            self.template = None
        self.active, self._refill_at = False, None
        self.shrunk_at = time.time()
        print(f"warm pool: no launch for {self.idle:.0f}s; emptied", file=sys.stderr)

    def due(self) -> list[str]:
        """Refill or empty the pool when due (every loop); held launches to start cold."""
        now = time.monotonic()
        busy = self.slots or self.template is not None
        if busy and not self.held and now - self._last_use >= self.idle:
            self.shrink()
        if self._refill_at is not None and now >= self._refill_at:
            self._refill_at = None
            self.refill()
        late = [d for d, until in self.held if now >= until]
        if late:
            noun = "replica" if len(late) == 1 else "replicas"
            print(f"warm pool: the template is not ready after {HOLD_SECONDS:.0f}s; "
                  f"starting {len(late)} {noun} cold", file=sys.stderr)
            self.held = [(d, until) for d, until in self.held if now < until]
        return late

    def _grow(self) -> None:
        now = time.monotonic()
        self._group = self._group + 1 if now - self._group_last <= GROUP_GAP else 1
        self._group_last = now
        if self.auto and self._group > self.size:
            self.size = min(self._group, warm.AUTO_MAX)

    def _eligible(self, directory: str) -> bool:
        spec = statedir.read_json(os.path.join(directory, statedir.LAUNCH))
        if spec is None:
            return False  # the supervisor will report it
        child = localranks.child_env(spec, directory)
        return launch_fits(list(spec["command"]), str(spec["cwd"]), child, self.env)

    def refill(self) -> None:
        """Fork standbys until there are `size` (ready or warming); never waits for one."""
        if self.template is not None and not self.template.ready:
            return  # one import at a time: the template's
        while self.active and not self.disabled and len(self.slots) < self.size:
            self._fork()

    def _fork(self) -> None:
        if self.template is None or not self.template.ready:
            slot = self._forked(warm.run_standby)  # it starts its own interpreter
            self.slots[slot.link.fileno()] = slot
            return
        ours, theirs = socket.socketpair()
        try:  # the template forks a standby supervisor serving `theirs` (SCM_RIGHTS)
            socket.send_fds(self.template.link, [b"F"], [theirs.fileno()])
        except OSError:
            ours.close()  # the template is gone: its socket says so next
        else:
            self.slots[ours.fileno()] = _Slot(ours, 0)
        theirs.close()

    def _forked(self, body: Callable[[socket.socket], int]) -> _Slot:
        ours, theirs = socket.socketpair()

        def child() -> int:
            self.close_in_child()
            ours.close()
            return body(theirs)

        pid = procs.fork_child(child)
        theirs.close()
        return _Slot(ours, pid)

    def close_in_child(self) -> None:
        for slot in self.slots.values():
            slot.link.close()
        self.slots.clear()
        if self.template is not None:
            self.template.link.close()
            self.template = None

    def write_status(self) -> None:
        ready = sum(slot.ready for slot in self.slots.values())
        status: dict[str, Any] = {
            "size": self.size,
            "auto": self.auto,
            "template": ("ready" if self.template.ready else "warming") if self.template
            else ("failed" if self.template_failed else "off"),
            "held": len(self.held),
            "active": self.active,
            "ready": ready,
            "warming": len(self.slots) - ready,
            "used": self.used,
            "disabled": self.disabled or None,
            "idle_seconds": self.idle,
            "shrunk_at": self.shrunk_at,
            "spawner_pid": os.getpid(),
        }
        if status == self._written:
            return
        try:
            statedir.write_json(self.status_path, status)
        except OSError:
            return  # the launches directory is gone (a test cleaned up): nothing to tell
        self._written = status
