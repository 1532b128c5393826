"""Capacity: quota per queue and slots per node, admission order, placement.

No side effects: a `Capacity` is built for one tick from the snapshot and updated as the tick
places replicas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from perdure.core.model import Job, Node, Replica


def admission_order(jobs: Iterable[Job]) -> list[Job]:
    """Higher priority first, then older first."""
    return sorted(jobs, key=lambda j: (-j.priority, j.created, j.id))


class Capacity:
    """Free slots on each schedulable node and in each queue, for one tick."""

    def __init__(
        self, nodes: Mapping[str, Node], quotas: Mapping[str, int | None], jobs: Iterable[Job]
    ) -> None:
        self.nodes = nodes
        self.quotas = quotas
        self.node_used: dict[str, int] = {n: 0 for n in nodes}
        self.queue_used: dict[str, int] = {q: 0 for q in quotas}
        for job in jobs:
            if job.state.holds_capacity:
                self.queue_used[job.spec.queue] = self.queue_used.get(job.spec.queue, 0) + job.slots
            for node, slots in job.used_slots().items():
                self.node_used[node] = self.node_used.get(node, 0) + slots

    def healthy_slots(self) -> int:
        return sum(n.slots for n in self.nodes.values() if n.state.schedulable)

    def free_slots(self) -> int:
        return sum(
            n.slots - self.node_used.get(n.name, 0)
            for n in self.nodes.values()
            if n.state.schedulable
        )

    def queue_free(self, queue: str) -> int | None:
        quota = self.quotas.get(queue)
        return None if quota is None else quota - self.queue_used.get(queue, 0)

    def take_quota(self, queue: str, slots: int) -> None:
        self.queue_used[queue] = self.queue_used.get(queue, 0) + slots

    def release_quota(self, queue: str, slots: int) -> None:
        self.queue_used[queue] = self.queue_used.get(queue, 0) - slots

    def place(
        self, replicas: list[Replica], prefer: Mapping[str, str | None] | None = None
    ) -> dict[str, str] | None:
        """Nodes for every replica (all or none), best fit; takes the slots when it succeeds.

        `prefer` maps a replica to the node it should stay on when that node is schedulable.
        A replica's `avoid_node` is never chosen.
        """
        free = {
            n.name: n.slots - self.node_used.get(n.name, 0)
            for n in self.nodes.values()
            if n.state.schedulable
        }
        chosen: dict[str, str] = {}
        for r in sorted(replicas, key=lambda r: -r.slots):
            want = (prefer or {}).get(r.name)
            if want is not None and want != r.avoid_node and free.get(want, -1) >= r.slots:
                node = want
            else:
                fits = [n for n, f in free.items() if f >= r.slots and n != r.avoid_node]
                if not fits:
                    return None
                node = min(fits, key=lambda n: (free[n], n))  # best fit keeps big holes free
            free[node] -= r.slots
            chosen[r.name] = node
        for r in replicas:
            self.node_used[chosen[r.name]] = self.node_used.get(chosen[r.name], 0) + r.slots
        return chosen

    def release(self, node: str | None, slots: int) -> None:
        if node is not None:
            self.node_used[node] = self.node_used.get(node, 0) - slots


def shortfall_message(job: Job, healthy: int) -> str:
    """The INSUFFICIENT_CAPACITY message: what the job needs against what is healthy."""
    pools = ", ".join(p.name for p in job.spec.pools)
    noun = "pool" if len(job.spec.pools) == 1 else "pools"
    return (
        f"Resources are insufficient in {noun} {pools}: need {job.slots} slots, "
        f"{healthy} healthy. Try fewer replicas or slots."
    )


def can_ever_fit(job: Job, nodes: Mapping[str, Node]) -> bool:
    """Whether the healthy nodes could hold the job if nothing else ran."""
    ready = sorted((n.slots for n in nodes.values() if n.state.schedulable), reverse=True)
    if sum(ready) < job.slots:
        return False
    free = list(ready)
    for r in sorted(job.replicas, key=lambda r: -r.slots):
        for i, f in enumerate(free):
            if f >= r.slots:
                free[i] -= r.slots
                break
        else:
            return False
    return True
