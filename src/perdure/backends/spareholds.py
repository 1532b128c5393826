"""The spare nodes each job's attempt holds: the last `HoldNodes` of each. No side effects."""

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
        return self._held.get((job_id, attempt), frozenset())

    def among(self, job_id: str, attempt: str, nodes: Iterable[str]) -> bool:
        """Whether the attempt holds any of `nodes` (an allocation's: it is kept for them)."""
        return not self.of(job_id, attempt).isdisjoint(nodes)

    def nodes(self) -> frozenset[str]:
        return frozenset().union(*self._held.values())
