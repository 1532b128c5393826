"""A launch the local backend watches, and its supervisor's fate: alive, given up before it
started (claimed with an abandon record, so a supervisor that comes later starts nothing), or
dead without recording the replica's exit, with the message a user reads for each.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from perdure import statedir
from perdure.backends.node import procs
from perdure.runtime.errorfile import last_lines, read_stderr_tail

# How often a supervisor is checked for having died: rarely, so a poll is mostly one stat each.
LIVENESS_CHECK_SECONDS = 0.25
# A launch whose supervisor has not claimed it by then is given up: a stuck spawner cannot
# hold a replica in limbo.
START_TIMEOUT_SECONDS = 60.0


@dataclass
class Tracked:
    """A launch this backend watches until its exit is reported."""

    launch_id: str
    node: str
    dir: str
    spawner: subprocess.Popen[bytes] | None = None  # the zygote asked to fork its supervisor
    sent_at: float = 0.0  # time.monotonic() when the spawner was asked
    supervisor: tuple[int, int] | None = None  # (pid, start ticks), from its claim
    started: bool = False
    status: dict[str, Any] = field(default_factory=dict)
    next_check: float = 0.0
    status_path: str = ""
    exit_path: str = ""

    def __post_init__(self) -> None:
        self.status_path = os.path.join(self.dir, statedir.STATUS)
        self.exit_path = os.path.join(self.dir, statedir.EXIT)

    @property
    def spawner_alive(self) -> bool:
        return self.spawner is not None and self.spawner.poll() is None


def abandon_record(identity: str) -> dict[str, Any]:
    """What a backend (`identity`) claims a launch with to give it up."""
    return {"abandoned_by": identity, "pid": os.getpid(), "time": time.time()}


def supervisor_gone(tracked: Tracked, now: float, identity: str) -> bool:
    """Whether the supervisor died, or never started and the launch was given up (now, by
    `identity`, once START_TIMEOUT_SECONDS passed or its spawner exited)."""
    tracked.next_check = now + LIVENESS_CHECK_SECONDS
    if tracked.supervisor is None:
        owner = statedir.read_json(os.path.join(tracked.dir, statedir.CLAIM)) or {}
        if not owner:
            if tracked.spawner_alive and now - tracked.sent_at < START_TIMEOUT_SECONDS:
                return False  # still on its way
            owner = statedir.claim(tracked.dir, abandon_record(identity))
        if "abandoned_by" in owner:
            return True
        tracked.supervisor = (owner["supervisor_pid"], owner["supervisor_start_ticks"])
    return not procs.is_alive(*tracked.supervisor)


def lost_message(tracked: Tracked, owner: dict[str, Any], identity: str,
                 early_log: str) -> str:
    """Why a launch ended without an exit record: `owner` is its claim, `early_log` the
    spawner's log."""
    lid = tracked.launch_id
    if owner.get("abandoned_by") not in (None, identity):
        return (
            f"launch {lid} was given up by another controller (pid {owner.get('pid')}) "
            "before its supervisor started; nothing ran"
        )
    if "abandoned_by" in owner:
        why = (
            f"was not started within {START_TIMEOUT_SECONDS:.0f} s"
            if tracked.spawner_alive
            else "was not started: the spawner exited"
        )
        return f"the supervisor of launch {lid} {why}; nothing ran. See {early_log}"
    log = os.path.join(tracked.dir, statedir.SUPERVISOR_LOG)
    last = last_lines(read_stderr_tail(log), 1, 500)
    words = f"Its last words: {last}. " if last else ""
    where = f"{words}See {log}." if os.path.exists(log) else f"See {early_log}."
    return (
        f"the supervisor of launch {lid} died without recording the replica's exit (a "
        f"replica it had started died with it). {where}"
    )

