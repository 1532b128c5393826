"""What `Checkpointer.maybe_save` does besides its policy: save at once on a preemption notice
(then exit suspended), and follow the interval the controller publishes for `every: auto`.

A notice may reach the ranks at different steps, and a timed policy's clock runs on each rank
by itself, so the ranks agree on both through a StopVote: a small all-reduce started at one
call and read at a later one, about every NOTICE_WITHIN seconds ($PERDURE_NOTICE_WITHIN, 0.5).
No call waits for the others on the step's critical path.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable

from perdure.runtime.checkpoint.comm import Comm
from perdure.runtime.checkpoint.policy import SavePolicy
from perdure.runtime.vote import StopVote

ENV_STEPS = "PERDURE_CHECKPOINT_EVERY"  # checkpoint.every_steps
ENV_SECONDS = "PERDURE_CHECKPOINT_EVERY_SECONDS"  # checkpoint.every_seconds
ENV_INTERVAL_FILE = "PERDURE_CHECKPOINT_INTERVAL_FILE"  # checkpoint.every: auto
ENV_NOTICE_WITHIN = "PERDURE_NOTICE_WITHIN"
REFRESH_SECONDS = 2.0
# Until the controller has published an interval (it measures a save first): save this often.
FIRST_INTERVAL_SECONDS = 60.0


def _number(name: str) -> float | None:
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not a number") from None


def notice_within() -> float:
    """Seconds within which the ranks agree on a notice ($PERDURE_NOTICE_WITHIN, 0.5)."""
    n = _number(ENV_NOTICE_WITHIN)
    if n is not None and not n >= 0:
        raise ValueError(f"{ENV_NOTICE_WITHIN}={n:g}: use seconds >= 0")
    return 0.5 if n is None else n


def published_interval(path: str) -> float | None:
    """The interval the controller published (`seconds` of its JSON), None if there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return float(data["seconds"]) if float(data["seconds"]) > 0 else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def policy_from_env() -> tuple[SavePolicy, str | None]:
    """The spec's `checkpoint` settings as the controller passes them in the environment, and
    the interval file to follow (every: auto); outside perdure: a policy that never saves."""
    auto = os.environ.get(ENV_INTERVAL_FILE) or None
    if auto is not None:
        return SavePolicy(every_seconds=published_interval(auto) or FIRST_INTERVAL_SECONDS), auto
    steps, seconds = _number(ENV_STEPS), _number(ENV_SECONDS)
    return SavePolicy(every_steps=int(steps) if steps else None, every_seconds=seconds), None


def notice_pending() -> bool:
    """Whether this process has a preemption notice (perdure.init()'s SIGTERM handler)."""
    context = sys.modules.get("perdure.runtime.context")
    ctx = context.current() if context is not None else None
    return bool(ctx is not None and ctx.should_stop)


class SaveSchedule:
    """Per Checkpointer: the agreement on notices and the auto interval's refresh."""

    def __init__(self, interval_file: str | None) -> None:
        self.interval_file = interval_file
        self.within = notice_within()
        self._vote: StopVote | None = None
        self._vote_comm: Comm | None = None
        self._next_read = 0.0

    def refresh(self, policy: SavePolicy, now: float) -> SavePolicy:
        """`policy` with the newest published interval (auto only; read every few seconds)."""
        if self.interval_file is None or now < self._next_read:
            return policy
        self._next_read = now + REFRESH_SECONDS
        seconds = published_interval(self.interval_file)
        if seconds is None or seconds == policy.every_seconds:
            return policy
        return dataclasses.replace(policy, every_seconds=seconds)

    def decide(
        self, by_steps: bool, by_clock: bool, comm_of: Callable[[], Comm]
    ) -> tuple[bool, bool]:
        """(save now, a notice reached some rank): the same on every rank. `by_clock` (this
        rank's clock) is agreed on in the next vote; `comm_of` is not asked between votes."""
        notice = notice_pending()
        vote = self._vote
        if vote is not None and not by_steps and vote.quiet():
            vote.poll_asking(notice, by_clock)  # counts the step; both wait for the vote
            return False, False
        comm = comm_of()
        if comm.world == 1:
            return by_steps or by_clock, notice
        if self._vote is None or self._vote_comm is not comm:  # a new group: a new vote
            self._vote, self._vote_comm = StopVote(comm.control_group, within=self.within), comm
        stop, asked = self._vote.poll_asking(notice, by_clock)
        return by_steps or asked, stop

    def close(self) -> None:
        """Wait for the vote in flight (before the process group goes)."""
        if self._vote is not None:
            self._vote.close()


def exit_suspended() -> None:
    """Leave with the "saved, resume me" status, as `Context.exit_suspended` does."""
    from perdure.runtime import goodput
    from perdure.runtime.context import EXIT_SUSPENDED, current

    goodput.flush()
    ctx = current()
    if ctx is not None:
        ctx.exit_suspended()
    sys.stdout.flush()
    os._exit(EXIT_SUSPENDED)
