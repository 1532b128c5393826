"""Elastic jobs: membership rounds instead of restarts (README.md, "Elastic jobs").

No side effects. A replica of an elastic job that is lost (crash, node loss, move) does not
stop the others: in `resize` mode the survivors go on as a smaller group when at least the
minimum is left, and the job grows back when the replacement is up; in `pause` mode the
survivors wait for the replacement at the same world size. Every change is a new round,
published with a Rendezvous decision; membership changes spend no restarts.
"""

from __future__ import annotations

from collections.abc import Mapping

from perdure.core.events import Rendezvous
from perdure.core.model import Job, Replica
from perdure.core.states import JobState, NodeState, ReplicaState
from perdure.core.tick import Tick


def publish(t: Tick, job: Job, members: list[str], reason: str,
            where: Mapping[str, str] | None = None) -> None:
    """Start round `job.round + 1` (or round 0 of an attempt) with `members` in rank order;
    `where`: nodes of members placed but not launched yet (as are those of `job.plan`)."""
    at = {r.name: r.node or "" for r in job.replicas}
    at.update((job.replicas[rank].name, node) for rank, node, _ in job.plan)
    at.update(where or {})
    rank = {r.name: r.rank for r in job.replicas}
    job.members = sorted(members, key=lambda n: rank[n])
    if reason != "admitted":
        job.round += 1
    t.decisions.append(Rendezvous(
        job.id, job.attempt, job.round,
        tuple((n, at[n]) for n in job.members), reason, t.now,
    ))
    job.layout = None  # its members' ranks changed: launches still to send get new ones
    t.event(job, "elastic", f"round {job.round}: {reason} (world size {len(job.members)})")


def lose(t: Tick, job: Job, r: Replica, why: str) -> None:
    """`r` left the group: shrink (resize, enough left) or pause for its replacement.

    Replicas lost together are one change: when `r`'s node is down, the job's other members
    on it leave in the same round (their own exits, which follow, change nothing more).
    """
    r = job.own(r)
    r.state, r.relaunch = ReplicaState.WAITING, False
    node_down = _down(t, r.node)
    members = set(job.members)
    if r.name not in members:
        return  # left with its node in an earlier round
    together = [x for x in job.replicas if x is not r and x.node == r.node
                and x.name in members] if node_down else []
    if job.spec.elastic.mode == "pause" and any(not x.alive for x in together):
        return  # left with its node in an earlier round
    lost = [r, *(x for x in together if x.alive)]
    gone = {x.name for x in lost}
    planned = {rank for rank, _, _ in job.plan}  # placed, their launches on their way
    survivors = [x.name for x in job.replicas
                 if x.name in members and x.name not in gone and (
                     x.state in _UP or x.rank in planned)]
    before = len(job.members)
    if len(lost) > 1:
        why = f"{why}; with it on node {r.node}: {', '.join(x.name for x in lost[1:])}"
    if job.spec.elastic.mode == "resize" and len(survivors) >= job.min_members:
        publish(t, job, survivors, f"shrink {before} -> {len(survivors)}: {why}")
        return
    job.state = JobState.PENDING
    publish(t, job, list(job.members), f"pause at world size {before}: {why}; "
                                      f"waiting for {', '.join(x.name for x in lost)}")


_UP = frozenset({ReplicaState.STARTING, ReplicaState.RUNNING})  # alive, not being stopped


def _down(t: Tick, node: str | None) -> bool:
    n = t.nodes.get(node or "")
    return n is not None and n.state is NodeState.DOWN


def joined(t: Tick, job: Job) -> None:
    """Grow the group by the replicas that are up and not members, once every replica
    launched is up: replacements started together join in one round."""
    if job.count(ReplicaState.STARTING) or len(job.members) == len(job.replicas):
        return  # some are still starting, or every replica is a member already
    members = set(job.members)  # a set: a list made this quadratic in the job's replicas
    new = [x.name for x in job.replicas if x.state is ReplicaState.RUNNING
           and x.name not in members and not _down(t, x.node)]
    if not new:
        return
    joining = set(new)
    grown = [x.name for x in job.replicas
             if x.alive and (x.name in members or x.name in joining)]
    publish(t, job, grown, f"grow {len(job.members)} -> {len(grown)}: {', '.join(new)} "
                           f"{'is' if len(new) == 1 else 'are'} up")


def may_wait_forever(job: Job) -> bool:
    """A resized job that runs with enough members waits for capacity without a deadline."""
    return (job.elastic and job.spec.elastic.mode == "resize"
            and job.state is JobState.RUNNING and len(job.members) >= job.min_members)
