"""Users' commands (cancel, preempt, resume, node actions) as the CLI and the API send them.

A command is stored for the controller's next tick, except: a finished job refuses every job
command (`CommandRefused`); with no controller running, a job command the core applies without
touching a replica or a node is applied here at once, under the controller lock.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from perdure import statedir
from perdure.controller.lock import try_lock
from perdure.core.commands import COMMANDS
from perdure.core.events import Command
from perdure.core.launchenv import LaunchSettings
from perdure.core.tick import Snapshot, Tick
from perdure.store.sqlite import Store

PAST = {"cancel": "cancelled", "preempt": "preempted", "resume": "resumed"}


class CommandRefused(ValueError):
    """The command cannot apply to its target; the message says why and what to do."""


@dataclass(frozen=True)
class Sent:
    kind: str
    target: str
    state: str | None  # the job's state after the command when it was applied here
    applied: bool  # applied here, with no controller running
    controller: bool  # a controller was running to apply it

    def describe(self, state_dir: Path) -> str:
        if self.applied:
            return (f"{self.target} is {self.state}: no controller was running and nothing "
                    "had to be stopped, so the command was applied at once")
        if self.controller:
            return f"{self.kind} requested for {self.target}"
        return (f"{self.kind} of {self.target} is queued, but no controller is running on "
                f"{state_dir}: it takes effect when one starts ({start_hint(state_dir)})")


def start_hint(state_dir: Path) -> str:
    return f"`perdure controller --state-dir {state_dir}`, or `perdure serve`"


def controller_running(state_dir: Path) -> bool:
    fd = _try_lock(state_dir)
    if fd is None:
        return True
    os.close(fd)
    return False


def send_job_command(store: Store, state_dir: Path, kind: str, job_id: str,
                     hold: bool = False) -> Sent:
    """Send `kind` (cancel, preempt, resume) to a job; CommandRefused for a finished one."""
    job = store.job(job_id)
    if job is None:
        raise CommandRefused(f"no job {job_id}")
    if job.state.terminal:
        raise CommandRefused(f"job {job_id} is {job.state.value}: a finished job cannot be "
                             f"{PAST[kind]}; submit the spec again to run it anew")
    fd = _try_lock(state_dir)
    if fd is None:  # a controller runs: it applies the command on its next tick
        store.command(kind, job_id, hold)
        return Sent(kind, job_id, None, applied=False, controller=True)
    try:
        state = _apply_alone(store, state_dir, Command(kind, job_id, time.time(), hold))
        if state is None:
            store.command(kind, job_id, hold)
        return Sent(kind, job_id, state, applied=state is not None, controller=False)
    finally:
        os.close(fd)


def send_node_command(store: Store, state_dir: Path, kind: str, node: str) -> Sent:
    running = controller_running(state_dir)
    store.command(kind, node)
    return Sent(kind, node, None, applied=False, controller=running)


def _try_lock(state_dir: Path) -> int | None:
    try:
        return try_lock(state_dir)
    except OSError as exc:
        raise CommandRefused(f"{state_dir / statedir.LOCK}: cannot be opened ({exc.strerror}); "
                             "check the state dir's permissions and free space") from None


def _apply_alone(store: Store, state_dir: Path, c: Command) -> str | None:
    """Apply `c` as a tick would when it stops or starts nothing: the job's new state, or
    None when it must wait for a controller."""
    job = store.job(c.target)
    if job is None or job.state.terminal or any(r.alive for r in job.replicas):
        return None
    snap = Snapshot({job.id: job}, store.nodes(), {})
    t = Tick(snap, c.time, LaunchSettings(str(state_dir), ""))
    COMMANDS[c.kind](t, c)
    after = t.jobs[job.id]
    if t.decisions or not t.changed or (after.state.terminal and job.attempt > 0):
        return None  # an ended job that ran leaves files on its nodes: a controller clears them
    store.commit_tick([t.jobs[i] for i in t.changed], t.events, None, None)
    return after.state.value
