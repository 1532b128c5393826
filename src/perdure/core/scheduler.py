"""Capacity: quota per queue, slots and GPUs per node, admission order, placement.

No side effects: a `Capacity` is built for one tick and updated as it places replicas. GPUs
are counted like slots; a placed replica also gets which of its node's GPUs it holds.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping

from perdure.core.model import Job
from perdure.core.records import Node
from perdure.core.replica import Replica
from perdure.core.text import plural

_NAME = operator.attrgetter("name")
_SLOTS = operator.attrgetter("slots")
_GPUS = operator.attrgetter("gpus")
_THIRD = operator.itemgetter(2)


def admission_order(jobs: Iterable[Job]) -> list[Job]:
    """Higher priority first, then older first."""
    return sorted(jobs, key=lambda j: j.order)


class Capacity:
    """Free slots and GPUs on each schedulable node and free slots in each queue, for one tick."""

    def __init__(
        self, nodes: Mapping[str, Node], quotas: Mapping[str, int | None], jobs: Iterable[Job]
    ) -> None:
        self.nodes = nodes
        self.quotas = quotas
        self.node_used: dict[str, int] = {n: 0 for n in nodes}
        self.queue_used: dict[str, int] = {q: 0 for q in quotas}
        self.gpus_used: dict[str, set[int]] = {}
        # replica -> the GPUs `place` gave it (the caller sets them on its own copy)
        self.devices: dict[str, list[int]] = {}
        for job in jobs:
            if job.awaiting_admission:
                continue
            if job.holds_capacity:
                self.queue_used[job.spec.queue] = self.queue_used.get(job.spec.queue, 0) + job.slots
            for node, slots in job.usage.items():
                self.node_used[node] = self.node_used.get(node, 0) + slots
            for node, held in job.gpu_usage.items():
                self.gpus_used.setdefault(node, set()).update(held)
        ready = [n for n in nodes.values() if n.schedulable]
        self.ready = {n.name: n.slots for n in ready}
        self.ready_gpus = {n.name: n.gpus for n in ready}
        self.healthy = sum(self.ready.values())
        self.healthy_gpus = sum(self.ready_gpus.values())
        self.free = sum(map(max, itertools.repeat(0), self._left()))

    def _left(self) -> Iterator[int]:
        """Each schedulable node's slots less those held."""
        used = map(self.node_used.get, self.ready, itertools.repeat(0))
        return map(operator.sub, self.ready.values(), used)

    def free_gpus(self) -> int:
        """GPUs free on schedulable nodes (in all: a replica needs them on one node)."""
        return sum(len(self._free_gpus(n)) for n in self.ready)

    def queue_free(self, queue: str) -> int | None:
        quota = self.quotas.get(queue)
        return None if quota is None else quota - self.queue_used.get(queue, 0)

    def take_quota(self, queue: str, slots: int) -> None:
        self.queue_used[queue] = self.queue_used.get(queue, 0) + slots

    def _free_gpus(self, node: str) -> list[int]:
        count = self.ready_gpus.get(node, 0)
        if not count:
            return []  # most nodes of a big CPU cluster: no list to build
        used = self.gpus_used.get(node, set())
        return [i for i in range(count) if i not in used]

    def place(
        self, replicas: list[Replica], prefer: Mapping[str, str | None] | None = None
    ) -> dict[str, str] | None:
        """Nodes for every replica (all or none), best fit, taking their slots; `devices`
        notes each one's GPUs. `prefer`: replica -> the node it should stay on."""
        if sum(map(_SLOTS, replicas)) > self.free:
            return None
        free = dict(zip(self.ready, self._left(), strict=True))
        if not any(prefer.values() if prefer else ()) and _alike_cpu(replicas):
            return self._fill(replicas, free)
        gpus = {n: self._free_gpus(n) for n in self.ready}
        fit = _BestFit(free, gpus)
        chosen: dict[str, str] = {}
        devices: dict[str, list[int]] = {}
        for r in sorted(replicas, key=lambda r: (-r.gpus, -r.slots)):
            want = (prefer or {}).get(r.name)
            if want is not None and free.get(want, -1) >= r.slots and (
                    len(gpus.get(want, ())) >= r.gpus):
                node = want
            else:
                # best fit keeps big holes free: fewest free GPUs first for a GPU replica, and
                # GPU nodes last for a CPU one (their GPUs are worth nothing without slots)
                best = fit.best(r.slots, r.gpus)
                if best is None:
                    return None
                node = best
            free[node] -= r.slots
            devices[r.name], gpus[node] = gpus[node][:r.gpus], gpus[node][r.gpus:]
            fit.moved(node)
            chosen[r.name] = node
        for r in replicas:
            node = chosen[r.name]
            self.node_used[node] = self.node_used.get(node, 0) + r.slots
            self.free -= r.slots
            self.devices[r.name] = devices[r.name]
            self.gpus_used.setdefault(node, set()).update(devices[r.name])
        return chosen

    def _fill(self, replicas: list[Replica], free: dict[str, int]) -> dict[str, str] | None:
        """`place` for replicas alike and without GPUs: fills the nodes, fewest free first."""
        slots, n = replicas[0].slots, len(replicas)  # some replicas (_alike_cpu)
        gpus = any(self.ready_gpus.values())  # else no node's GPUs to look at (a CPU cluster)
        order = sorted((gpus and bool(self._free_gpus(node)), f, node)
                       for node, f in free.items() if f >= slots)
        nodes = list(map(_THIRD, order))
        takes = [n] * len(nodes) if slots == 0 else [f // slots for _, f, _ in order]
        ends = list(itertools.accumulate(takes))
        last = bisect.bisect_left(ends, n)  # the node that holds the last replica
        if last == len(ends):
            return None
        del nodes[last + 1:], takes[last + 1:]
        takes[-1] = n - (ends[last - 1] if last else 0)
        at = itertools.chain.from_iterable(map(itertools.repeat, nodes, takes))
        chosen = dict(zip(map(_NAME, replicas), at, strict=True))
        held = map(operator.mul, takes, itertools.repeat(slots))
        used = map(self.node_used.get, nodes, itertools.repeat(0))
        self.node_used.update(zip(nodes, map(operator.add, used, held), strict=True))
        self.free -= slots * n
        return chosen


def _alike_cpu(replicas: list[Replica]) -> bool:
    return bool(replicas) and set(map(_GPUS, replicas)) == {0} and len(
        set(map(_SLOTS, replicas))) == 1


class _BestFit:
    """The node a replica fits best (fewest free GPUs, then slots), through buckets of equal
    (free GPUs, free slots) instead of a scan of every node per replica."""

    def __init__(self, free: dict[str, int], gpus: Mapping[str, list[int]]) -> None:
        self.free, self.gpus = free, gpus
        self.buckets: dict[tuple[int, int], list[str]] = {}
        for n, f in free.items():
            if f > 0:
                self.buckets.setdefault((len(gpus[n]), f), []).append(n)
        for heap in self.buckets.values():
            heapq.heapify(heap)

    def _top(self, key: tuple[int, int]) -> str | None:
        heap = self.buckets[key]
        while heap and (len(self.gpus[heap[0]]), self.free[heap[0]]) != key:
            heapq.heappop(heap)  # moved to another bucket since it was pushed
        return heap[0] if heap else None

    def best(self, slots: int, gpus: int) -> str | None:
        def order(key: tuple[int, int]) -> tuple[int, int]:
            g, f = key
            return (g if gpus else int(g > 0), f)

        groups: dict[tuple[int, int], list[str]] = {}
        for key in [k for k in self.buckets if k[1] >= slots and k[0] >= gpus]:
            top = self._top(key)
            if top is None:
                del self.buckets[key]
            else:
                groups.setdefault(order(key), []).append(top)
        return min(groups[min(groups)]) if groups else None

    def moved(self, node: str) -> None:
        """`node`'s free slots or GPUs changed (the caller updated them)."""
        f = self.free[node]
        if f > 0:
            heapq.heappush(self.buckets.setdefault((len(self.gpus[node]), f), []), node)


def shortfall_message(job: Job, healthy: int, healthy_gpus: int = 0) -> str:
    """The INSUFFICIENT_CAPACITY message: what the job needs against what is healthy."""
    pools = ", ".join(p.name for p in job.spec.pools)
    noun = "pool" if len(job.spec.pools) == 1 else "pools"
    need = f"need {plural(job.slots, 'slot')}, {healthy} healthy"
    fix = "Try fewer replicas or slots."
    if job.spec.total_gpus:
        need += f"; {plural(job.spec.total_gpus, 'GPU')}, {healthy_gpus} healthy"
        fix = "Try fewer replicas, slots or GPUs."
    return f"Resources are insufficient in {noun} {pools}: {need}. {fix}"


def can_ever_fit(job: Job, cap: Capacity) -> bool:
    """Whether the healthy nodes could hold the job if nothing else ran."""
    if job.slots > cap.healthy or job.spec.total_gpus > cap.healthy_gpus:
        return False
    if not job.spec.total_gpus and max(map(_SLOTS, job.replicas), default=0) == 1:
        return True  # one slot each: any healthy slots do, no packing to try
    return Capacity(cap.nodes, {}, ()).place(job.replicas) is not None
