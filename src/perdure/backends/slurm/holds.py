"""The Slurm backend's holds beyond its launches: spare nodes kept in an attempt's allocation,
and what it tells the controller of an allocation's wait in Slurm's queue.

`AllocHolds` is a half of `SlurmBackend` (which holds the state). Side effects: none here but
the backend's bookkeeping (the allocations are submitted and given back by the backend).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from perdure.backends.agents.alloc import Alloc
from perdure.backends.agents.reports import Tracked
from perdure.core.events import HoldNodes, LaunchQueued, Observation


class AllocHolds:
    """See the module docstring."""

    _allocs: list[Alloc]
    _active: dict[str, Tracked]
    _spares: dict[tuple[str, str], set[str]]  # (job, attempt) -> the spare nodes it holds

    if TYPE_CHECKING:  # SlurmBackend's, which this half calls
        def _attach(self) -> None: ...

    def hold_nodes(self, hold: HoldNodes) -> None:
        """The spare nodes `hold.job_id`'s attempt holds: kept in its allocation (a further
        one when that was already submitted) with an agent and warm pool each, so a lost
        node's replicas launch on one at once, no new queue wait. An allocation that holds
        neither a launch nor a spare is given back (`_release`)."""
        self._attach()
        key = (hold.job_id, str(hold.attempt))
        self._spares[key] = set(hold.nodes)
        if not hold.nodes:
            del self._spares[key]
            return
        mine = [a for a in self._allocs if (a.job_id, a.attempt) == key and not a.ending]
        new = [n for n in hold.nodes if not any(n in a.nodes for a in mine)]
        if not new:
            return
        unsubmitted = next((a for a in mine if not a.slurm_id), None)
        if unsubmitted is not None:
            unsubmitted.nodes.extend(new)
            return
        like = mine[0] if mine else Alloc(*key, [])
        self._allocs.append(Alloc(*key, new, cpus=like.cpus, gpus=like.gpus,
                                     warning=like.warning))

    def _holds_spare(self, alloc: Alloc) -> bool:
        return bool(self._spares.get((alloc.job_id, alloc.attempt), set()) & set(alloc.nodes))

    def _queued(self, alloc: Alloc, reason: str, out: list[Observation]) -> None:
        """Tell the controller that `alloc`'s launches wait in Slurm's queue for `reason`
        (the job shows QUEUED with it), or, with "", that the allocation started."""
        alloc.told = reason
        for tracked in [t for t in self._active.values() if t.alloc is alloc]:
            out.append(LaunchQueued(tracked.launch.launch_id, reason, time.time(), "Slurm",
                                    f"Slurm job {alloc.slurm_id}"))
