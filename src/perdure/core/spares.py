"""Spare nodes (`spares: K` in a pool): whole free nodes an attempt holds for a lost node's
replicas, so they are placed at once instead of waiting for capacity or shrinking.

No side effects. A spare's slots count as the job's while the attempt runs; one that takes a
replacement is sought again.
"""

from __future__ import annotations

from collections.abc import Iterable

from perdure.core.events import HoldNodes
from perdure.core.model import Job
from perdure.core.replica import Replica
from perdure.core.scheduler import Capacity
from perdure.core.states import JobState
from perdure.core.tick import Tick

_HOLDING = (JobState.PENDING, JobState.RUNNING)


def lend(cap: Capacity, job: Job, todo: list[Replica]) -> dict[str, str | None]:
    """Free the job's spares in `cap` for its waiting replicas; where each should go."""
    for node, slots in job.spares.items():
        cap.node_used[node] = cap.node_used.get(node, 0) - slots
        cap.free += slots
    room = dict(job.spares)
    prefer: dict[str, str | None] = {}
    for r in todo:
        if r.node is not None and r.node in cap.ready:
            prefer[r.name] = r.node
            continue
        spare = next((n for n, free in room.items() if free >= r.slots and n in cap.ready),
                     None)
        if spare is not None:
            room[spare] -= r.slots
        prefer[r.name] = spare
    return prefer


def settle(t: Tick, cap: Capacity, job: Job, placed: dict[str, str] | None) -> None:
    """After placing `job`'s replicas: spares that took one are used up, the rest held again."""
    used = set((placed or {}).values()) & set(job.spares)
    for node in used:
        t.event(job, "spare", f"spare node {node} took "
                              f"{', '.join(r for r, n in (placed or {}).items() if n == node)}"
                              " (no wait for capacity); seeking another spare")
        del job.spares[node]
    for node, slots in job.spares.items():
        cap.node_used[node] = cap.node_used.get(node, 0) + slots
        cap.free -= slots


def let_go_unfit(t: Tick) -> None:
    """Let go of spares on nodes that can no longer take a replica."""
    for seen in list(t.jobs.values()):
        if not seen.spares or all(t.nodes[n].schedulable for n in seen.spares if n in t.nodes):
            continue
        job = t.mine(seen.id)
        for node in [n for n in job.spares if n not in t.nodes or not t.nodes[n].schedulable]:
            del job.spares[node]
            shown = t.nodes[node].shown if node in t.nodes else "gone"
            t.event(job, "spare", f"spare node {node} let go ({shown}); seeking another spare")


def short(job: Job) -> bool:
    """Whether a running attempt holds fewer spares than its spec asks for."""
    return (job.spares_wanted > len(job.spares) and job.state in _HOLDING
            and job.after_stop is None)


def seek(t: Tick, cap: Capacity, jobs: Iterable[Job]) -> None:
    """Hold free whole nodes for jobs `short` of spares, highest priority first."""
    for seen in sorted(jobs, key=lambda j: j.order):
        want = seen.spares_wanted
        mine = {r.node for r in seen.replicas if r.alive}
        free = [n for n, slots in cap.ready.items()
                if n not in mine and n not in seen.spares and cap.node_used.get(n, 0) == 0]
        if not free:
            continue
        job = t.mine(seen.id)
        for node in sorted(free)[:want - len(job.spares)]:
            slots = cap.ready[node]
            job.spares[node] = slots
            cap.node_used[node] = slots
            cap.free -= slots
            t.event(job, "spare", f"holding spare node {node} ({len(job.spares)} of {want})")


def holds(before: Job | None, job: Job) -> list[HoldNodes]:
    """The HoldNodes for `job`'s spares when a tick changed them."""
    if before is None:
        return []
    if before.attempt != job.attempt:
        out = [HoldNodes(job.id, before.attempt, ())] if before.spares else []
        if job.spares:
            out.append(HoldNodes(job.id, job.attempt, tuple(sorted(job.spares))))
        return out
    if before.spares.keys() != job.spares.keys():
        return [HoldNodes(job.id, job.attempt, tuple(sorted(job.spares)))]
    return []
