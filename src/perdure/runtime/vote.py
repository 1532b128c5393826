"""StopVote: every rank agrees on the step to stop at, without a blocking collective per step.

    vote = StopVote()
    for step in ...:
        train_step()
        if vote.poll(ctx.should_stop):     # True on every rank at the same step
            save_and_exit_suspended()

Each `poll` starts a one-element all-reduce (MAX) of this rank's flag in the background and
returns the result of the one started at the previous `poll`, which the step in between has
long finished: the wait is free, where a blocking all-reduce per step costs a round trip on
the step's critical path. The price is one step: a notice seen at step t stops every rank at
step t + 1. All ranks must call `poll` the same number of times (once per step), as they do
any collective. Without a process group (or with one rank) the flag is the answer.
"""

from __future__ import annotations

from typing import Any


class StopVote:
    """A background OR over ranks of a per-step flag; the answer arrives one call later."""

    def __init__(self, group: Any = None) -> None:
        self._group = group
        self._work: Any = None
        self._flag: Any = None

    def _distributed(self) -> bool:
        import torch.distributed as dist

        return bool(dist.is_available() and dist.is_initialized()
                    and dist.get_world_size(self._group) > 1)

    def poll(self, flag: bool) -> bool:
        """Vote `flag` for this step; True (on every rank alike) once any rank voted True."""
        if not self._distributed():
            return flag
        import torch
        import torch.distributed as dist

        agreed = False
        if self._work is not None:
            self._work.wait()
            agreed = bool(self._flag.item())
        if agreed:
            self._work = None
            return True
        self._flag = torch.tensor([int(flag)], dtype=torch.int32)
        self._work = dist.all_reduce(self._flag, op=dist.ReduceOp.MAX, group=self._group,
                                     async_op=True)
        return False

    def close(self) -> None:
        """Wait for the vote in flight (before tearing the process group down)."""
        if self._work is not None:
            self._work.wait()
            self._work = None
