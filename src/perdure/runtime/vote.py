"""StopVote: every rank agrees on the step to stop at, without a blocking collective per step.

A vote is an all-reduce (MAX) of the ranks' flags, started in the background at one `poll`
and read at the next, so the step in between hides its wait. With `within=S` seconds a vote
runs every N steps, N steps taking about S seconds (each rank proposes N; the smallest wins).
All ranks must call `poll` once per step, as they do any collective.
"""

from __future__ import annotations

import time
from typing import Any

MAX_EVERY = 1000  # steps between votes at most, however fast the steps


class StopVote:
    """A background OR over ranks of a per-step flag; the answer arrives one call later."""

    def __init__(self, group: Any = None, *, within: float | None = None) -> None:
        if within is not None and not within >= 0:
            raise ValueError(f"within is {within!r}; pass seconds >= 0, or None to vote "
                             "every step")
        self._group = group
        self._within = within
        self._work: Any = None
        self._votes: Any = None
        self._seen = False
        self._asked = False  # poll_asking's question, until a vote carries it
        self._polls = 0  # polls so far
        self._next = 0  # the poll that starts the next vote
        self._last: tuple[int, float] | None = None  # (poll, time) of the last vote started

    def _distributed(self) -> bool:
        import torch.distributed as dist

        return bool(dist.is_available() and dist.is_initialized()
                    and dist.get_world_size(self._group) > 1)

    def poll(self, flag: bool) -> bool:
        """Vote `flag` for this step; True (on every rank alike) once any rank voted True."""
        return self.poll_asking(flag, False)[0]

    def poll_asking(self, flag: bool, ask: bool) -> tuple[bool, bool]:
        """`poll`, with a second question carried by the same votes: (stop, asked), where
        `asked` is True on every rank alike at the poll that reads a vote to which some rank
        brought `ask` (an `ask` between votes waits for the next one, as a flag does). A
        timed checkpoint asks this way: any rank's clock says a save is due, all ranks save
        at the same step, without a collective of its own."""
        quiet = self.quiet()
        if not quiet and not self._distributed():
            return flag, ask
        self._seen = self._seen or flag
        self._asked = self._asked or ask
        poll, self._polls = self._polls, self._polls + 1
        if quiet:  # between votes (`within`): count the step, touch no group
            return False, False
        answered = False
        if self._work is not None:  # started at the previous poll
            self._work.wait()
            self._work = None
            agreed, asked, neg_every = (int(v) for v in self._votes.tolist())
            if agreed:
                return True, bool(asked)
            if asked:  # answered: what was asked since is covered by it
                answered, self._asked = True, False
            self._next = poll - 1 + max(1, -neg_every)
        if poll >= self._next:
            self._start(poll)
        return False, answered

    def quiet(self) -> bool:
        """Whether the next `poll` only counts: no vote is in flight or due to start at it."""
        return self._work is None and self._polls < self._next

    def _start(self, poll: int) -> None:
        import torch
        import torch.distributed as dist

        self._votes = torch.tensor([int(self._seen), int(self._asked), -self._propose(poll)],
                                   dtype=torch.int64)
        self._asked = False  # carried by this vote
        self._work = dist.all_reduce(self._votes, op=dist.ReduceOp.MAX, group=self._group,
                                     async_op=True)

    def _propose(self, poll: int) -> int:
        """Steps until the next vote, by this rank's clock (the smallest proposal wins)."""
        if self._within is None:
            return 1
        now, last = time.monotonic(), self._last
        self._last = (poll, now)
        if last is None or now <= last[1]:
            return 1  # nothing measured yet: vote again at the next step
        step_s = (now - last[1]) / (poll - last[0])
        return max(1, min(MAX_EVERY, int(self._within / step_s)))

    def close(self) -> None:
        """Wait for the vote in flight (before tearing the process group down)."""
        if self._work is not None:
            self._work.wait()
            self._work = None
