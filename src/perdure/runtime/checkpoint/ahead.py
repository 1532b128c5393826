"""The ranks' agreement on a save, read by the background instead of waited for in save().

Every save needs the ranks to agree that it can go ahead: every rank prepared its state, and
either no rank's state changed layout since the plan or every rank's did (then they plan
again, together). Asked as a blocking all-gather in save(), that agreement cost each save one
collective's latency on the step's path: ~0.5 ms with 2 ranks on 2 cores, 4-7 ms with 4
(bench/ray.py's job), more than the rest of save() together.

Once a plan exists, a background save of the usual kind asks it without waiting: the vote is an
all-gather started in save() (`PendingVotes`), and a rank whose own vote is clean stages and
hands the save over at once. Its persist reads the votes before it writes anything: when another
rank could not prepare its state or changed its layout alone, the save is given up on every
rank (nothing is written; a rank that could not prepare fails it with the reason, a layout
change only skips it) and every rank makes its next save the blocking way, where a layout
change is planned again. A rank whose own vote is not clean waits for the votes in save(), as
before: when every rank changed its layout, they plan again at once and the save goes ahead;
otherwise it is skipped (or its preparation error raised). Every rank sees the same votes, so
every rank takes the same way at every save.

Side effects: the all-gather on the checkpoint's control group.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from perdure.runtime import compat
from perdure.runtime.checkpoint.comm import rows
from perdure.runtime.checkpoint.errors import CheckpointError

OK, CHANGED, URL = 0, 1, 2  # a vote: [prepared, layout changed, url key]


class SaveSkipped(Exception):
    """A save given up on every rank because some ranks' state changed layout alone."""


class PendingVotes:
    """One save's votes, gathered in the background; `result()` waits for them (any thread,
    any number of times)."""

    def __init__(self, group: Any, world: int, vote: list[int]) -> None:
        self._mine = torch.tensor(vote, dtype=torch.int64)
        self._out = torch.empty(world * len(vote), dtype=torch.int64)
        self._work = compat.all_gather_single(self._out, self._mine, group=group, async_op=True)
        self._lock = threading.Lock()
        self._votes: list[list[int]] | None = None

    def result(self) -> list[list[int]]:
        with self._lock:
            if self._votes is None:
                self._work.wait()
                self._votes = rows(self._out.numpy().tolist(), len(self._mine))
            return self._votes


def vote(prepared: bool, changed: bool, url_key: int) -> list[int]:
    return [int(prepared), int(changed), url_key]


def settled(votes: list[list[int]]) -> bool:
    """Whether every rank prepared its state and all agree on the layout (unchanged on all,
    or changed on all) and the URL. No side effects."""
    return (all(v[OK] for v in votes) and len({v[CHANGED] for v in votes}) == 1
            and len({v[URL] for v in votes}) == 1)


def unprepared(votes: list[list[int]], step: int) -> CheckpointError | None:
    """The error every rank gives a save that some rank could not prepare (the first value
    of each rank's vote, in either kind of agreement, is whether it prepared). No side
    effects."""
    failed = [rank for rank, v in enumerate(votes) if not v[OK]]
    if not failed:
        return None
    return CheckpointError(
        f"save of step {step} abandoned: rank(s) {failed} could not prepare their state "
        "(their own error says why); no rank saved."
    )


def check(votes: list[list[int]], step: int) -> None:
    """For a rank that handed its save over with a clean vote: raise CheckpointError when some
    rank could not prepare, SaveSkipped when some changed layout (or URL). No side effects."""
    error = unprepared(votes, step)
    if error is not None:
        raise error
    if not settled(votes):
        changed = [rank for rank, v in enumerate(votes) if v[CHANGED]]
        raise SaveSkipped(
            f"save of step {step} skipped: the state of rank(s) {changed} changed layout since "
            "the last save and the others' did not; the next save plans again."
        )
