"""Elastic jobs: membership rounds instead of restarts (DESIGN.md "Elastic jobs").

No side effects. A replica of an elastic job that is lost (crash, node loss, move) does not
stop the others: in `resize` mode the survivors go on as a smaller group when at least the
minimum is left, and the job grows back when the replacement is up; in `pause` mode the
survivors wait for the replacement at the same world size. Every change is a new round,
published with a Rendezvous decision; membership changes spend no restarts.
"""

from __future__ import annotations

from perdure.core.events import Rendezvous
from perdure.core.model import Job, Replica
from perdure.core.states import JobState, ReplicaState
from perdure.core.tick import Tick


def publish(t: Tick, job: Job, members: list[str], reason: str) -> None:
    """Start round `job.round + 1` (or round 0 of an attempt) with `members` in rank order."""
    by_name = {r.name: r for r in job.replicas}
    rank = {r.name: r.rank for r in job.replicas}
    job.members = sorted(members, key=lambda n: rank[n])
    if reason != "admitted":
        job.round += 1
    t.decisions.append(Rendezvous(
        job.id, job.attempt, job.round,
        tuple((n, by_name[n].node or "") for n in job.members), reason, t.now,
    ))
    t.event(job, "elastic", f"round {job.round}: {reason} (world size {len(job.members)})")


def lose(t: Tick, job: Job, r: Replica, why: str) -> None:
    """`r` left the group: shrink (resize, enough left) or pause for its replacement."""
    r.state, r.relaunch = ReplicaState.WAITING, False
    survivors = [x.name for x in job.replicas
                 if x.name in job.members and x.alive and x.state is not ReplicaState.STOPPING]
    before = len(job.members)
    if job.spec.elastic.mode == "resize" and len(survivors) >= job.min_members:
        publish(t, job, survivors, f"shrink {before} -> {len(survivors)}: {why}")
        return
    job.state = JobState.PENDING
    publish(t, job, list(job.members), f"pause at world size {before}: {why}; "
                                      f"waiting for {r.name}")


def joined(t: Tick, job: Job, r: Replica) -> None:
    """A replica of an elastic job is up: grow the group if it was not a member."""
    if r.name in job.members:
        return
    grown = [x.name for x in job.replicas
             if x.state is ReplicaState.RUNNING and (x.name in job.members or x is r)]
    publish(t, job, grown, f"grow {len(job.members)} -> {len(grown)}: {r.name} is up")


def may_wait_forever(job: Job) -> bool:
    """A resized job that runs with enough members waits for capacity without a deadline."""
    return (job.elastic and job.spec.elastic.mode == "resize"
            and job.state is JobState.RUNNING and len(job.members) >= job.min_members)
