"""The spare nodes each job's attempt holds, as a backend keeps them from `hold_nodes`.

The core decides which nodes an attempt holds (core/spares.py) and the controller tells the
backend each change as a `HoldNodes`, per attempt: this keeps the last word of each, so a
backend asks what one attempt holds (Slurm, Kubernetes: which allocations to keep) or what all
hold together (Ray: which nodes' warm pools to keep full).

No side effects.
"""

from __future__ import annotations

from collections.abc import Iterable

from perdure.core.events import HoldNodes


class SpareHolds:
    """Spare nodes per (job, attempt); attempts are strings, as the launches' env has them."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], frozenset[str]] = {}

    def update(self, hold: HoldNodes) -> tuple[str, str]:
        """Keep `hold` (an empty one ends its attempt's hold); its (job, attempt)."""
        key = (hold.job_id, str(hold.attempt))
        if hold.nodes:
            self._held[key] = frozenset(hold.nodes)
        else:
            self._held.pop(key, None)
        return key

    def of(self, job_id: str, attempt: str) -> frozenset[str]:
        """The nodes one attempt holds (none once its hold ended)."""
        return self._held.get((job_id, attempt), frozenset())

    def among(self, job_id: str, attempt: str, nodes: Iterable[str]) -> bool:
        """Whether the attempt holds any of `nodes` (an allocation's: it is kept for them)."""
        return not self.of(job_id, attempt).isdisjoint(nodes)

    def nodes(self) -> frozenset[str]:
        """Every node some attempt holds."""
        return frozenset().union(*self._held.values())
