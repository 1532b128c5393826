"""Capacity: quota per queue and slots per node, admission order, placement.

No side effects: a `Capacity` is built for one tick from the snapshot and updated as the tick
places replicas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from perdure.core.model import Job, Node, Replica
from perdure.core.states import JobState
from perdure.core.text import plural


def admission_order(jobs: Iterable[Job]) -> list[Job]:
    """Higher priority first, then older first."""
    return sorted(jobs, key=lambda j: j.order)


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
            if job.state is JobState.QUEUED:
                continue
            if job.state.holds_capacity:
                self.queue_used[job.spec.queue] = self.queue_used.get(job.spec.queue, 0) + job.slots
            for node, slots in job.usage.items():
                self.node_used[node] = self.node_used.get(node, 0) + slots
        ready = [n for n in nodes.values() if n.state.schedulable]
        self.ready = {n.name: n.slots for n in ready}
        self.healthy = sum(self.ready.values())
        self.largest = max(self.ready.values(), default=0)
        self.free = sum(max(0, s - self.node_used.get(n, 0)) for n, s in self.ready.items())

    def healthy_slots(self) -> int:
        return self.healthy

    def free_slots(self) -> int:
        return self.free

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

        `prefer` maps a replica to the node it should stay on when that node is schedulable
        (a failed or draining node is not: replicas move off it by themselves).
        """
        if sum(r.slots for r in replicas) > self.free:
            return None
        free = {n: s - self.node_used.get(n, 0) for n, s in self.ready.items()}
        chosen: dict[str, str] = {}
        for r in sorted(replicas, key=lambda r: -r.slots):
            want = (prefer or {}).get(r.name)
            if want is not None and free.get(want, -1) >= r.slots:
                node = want
            else:
                fits = [n for n, f in free.items() if f >= r.slots]
                if not fits:
                    return None
                node = min(fits, key=lambda n: (free[n], n))  # best fit keeps big holes free
            free[node] -= r.slots
            chosen[r.name] = node
        for r in replicas:
            self.node_used[chosen[r.name]] = self.node_used.get(chosen[r.name], 0) + r.slots
            self.free -= r.slots
        return chosen


def shortfall_message(job: Job, healthy: int) -> str:
    """The INSUFFICIENT_CAPACITY message: what the job needs against what is healthy."""
    pools = ", ".join(p.name for p in job.spec.pools)
    noun = "pool" if len(job.spec.pools) == 1 else "pools"
    return (
        f"Resources are insufficient in {noun} {pools}: need {plural(job.slots, 'slot')}, "
        f"{healthy} healthy. Try fewer replicas or slots."
    )


def can_ever_fit(job: Job, cap: Capacity) -> bool:
    """Whether the healthy nodes could hold the job if nothing else ran."""
    if job.slots > cap.healthy:
        return False
    widest = max((r.slots for r in job.replicas), default=0)
    if widest == 1 or widest * len(job.replicas) <= cap.largest:
        return True  # fits without bin packing
    free = sorted(cap.ready.values(), reverse=True)
    for r in sorted(job.replicas, key=lambda r: -r.slots):
        for i, f in enumerate(free):
            if f >= r.slots:
                free[i] -= r.slots
                break
        else:
            return False
    return True
