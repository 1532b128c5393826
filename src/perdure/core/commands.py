"""Users' commands (cancel, preempt, resume, node actions) as a dispatch table.

No side effects: each handler changes the tick's copies and records decisions and events.
"""

from __future__ import annotations

from collections.abc import Callable

from perdure.core import health
from perdure.core.events import Command
from perdure.core.launchenv import master_node
from perdure.core.model import Job, JobError
from perdure.core.records import Strike
from perdure.core.states import ErrorCode, JobState, NodeState, ReplicaState
from perdure.core.text import plural
from perdure.core.tick import Tick

CANCELLED_MESSAGE = "cancelled by user"


def _submit(t: Tick, c: Command) -> None:
    job = t.touch(c.target)
    if job is not None:
        t.active = True
        t.event(job, "state", f"QUEUED: submitted to queue {job.spec.queue} "
                              f"({plural(job.slots, 'slot')}, priority {job.priority})")


def _cancel(t: Tick, c: Command) -> None:
    job = t.touch(c.target)
    if job is None or job.state.terminal or job.state is JobState.CANCELLING:
        return
    job.error = JobError(ErrorCode.CANCELLED, CANCELLED_MESSAGE)
    if job.awaiting_admission or job.state is JobState.SUSPENDED:
        job.state = JobState.CANCELLED
        t.event(job, "state", f"CANCELLED: {CANCELLED_MESSAGE}")
        t.active = True
        return
    job.state = JobState.CANCELLING
    t.event(job, "state", "CANCELLING: stopping every replica")
    t.end(job, JobState.CANCELLED)


def _preempt(t: Tick, c: Command) -> None:
    job = t.touch(c.target)
    if job is None:
        return
    suspend(t, job, c, "preemption notice sent")


def suspend(t: Tick, job: Job, c: Command, why: str) -> None:
    job.hold = c.hold
    if job.awaiting_admission and c.hold:
        job.state = JobState.SUSPENDED
        t.event(job, "state", "SUSPENDED: held before it started; `perdure resume` releases it")
    elif job.state in (JobState.PENDING, JobState.RUNNING) or job.in_backend_queue:
        job.state = JobState.SUSPENDING
        grace = job.spec.preemption.grace_seconds
        t.event(job, "state", f"SUSPENDING: {why}, grace {grace:g}s"
                              + (" (held until resumed)" if c.hold else ""))
        t.end(job, JobState.SUSPENDED, notice="preemption")


def _resume(t: Tick, c: Command) -> None:
    job = t.touch(c.target)
    if job is None:
        return
    job.hold = False
    if job.state is JobState.SUSPENDED:
        job.state = JobState.QUEUED
        t.active = True
        t.event(job, "state", "QUEUED: resumed by the user")


def _fail_node(t: Tick, c: Command) -> None:
    if t.set_node(c.target, NodeState.DOWN) is None:
        return
    t.event(None, "node", f"node {c.target} failed: its replicas are lost")
    for job_id, seen in list(t.jobs.items()):
        # Its replicas still being stopped: a round began before the node was seen lost.
        if any(r.node == c.target and r.state is ReplicaState.STOPPING for r in seen.replicas):
            job = t.mine(job_id)
            if job.blame is not None:
                _forgive_lost_peer(t, job, c.target)
            if _launched_towards(job, c.target):
                t.event(job, "decision", f"restart: node {c.target}, rank 0's, was lost while "
                                         "replicas of this round were launched towards it: a "
                                         "new round (no restart counted)")
                t.restart(job, [], notice=None, why=f"node {c.target} lost")
    t.kill_node(c.target)
    health.strike(t, c.target, Strike(c.time, health.NODE_LOST))


def _launched_towards(job: Job, node: str) -> bool:
    """Whether replicas of this group round were launched towards rank 0 on `node`, now lost."""
    return (not job.elastic and job.spec.restart.scope == "group" and job.after_stop is None
            and master_node(job) == node
            and any(r.node != node and r.state in (ReplicaState.STARTING, ReplicaState.RUNNING)
                    for r in job.replicas))


def _forgive_lost_peer(t: Tick, job: Job, node: str) -> None:
    """A lost host is seen after its peers' lost-peer exits: the restart charged to one was
    the node's doing, and a lost node spends no restart."""
    blamed = t.unblame(job)
    t.event(job, "decision", f"node {node} was lost: {blamed.name}'s lost-peer exit came "
                             f"from it, so {blamed.name}'s restart is not counted")


def _drain_node(t: Tick, c: Command) -> None:
    if t.set_node(c.target, NodeState.DRAINING) is None:
        return
    said = f" ({c.why})" if c.why else ""
    t.event(None, "node", f"node {c.target} draining{said}: maintenance notice to its replicas")
    t.move_off(c.target, c.why or "maintenance", f"drain {c.target}")


def _preempt_node(t: Tick, c: Command) -> None:
    """The node is being reclaimed: every job on it saves, suspends and is requeued."""
    if t.set_node(c.target, NodeState.DOWN) is None:
        return
    t.event(None, "node", f"node {c.target} preempted: jobs on it suspend and are requeued")
    for job_id, seen in list(t.jobs.items()):
        if any(r.node == c.target and r.alive for r in seen.replicas):
            job = t.mine(job_id)
            suspend(t, job, Command("preempt", job_id, c.time),
                     f"node {c.target} preempted; notice sent")


def _restore_node(t: Tick, c: Command) -> None:
    """The user's `perdure node restore`: back to READY, its quarantine lifted."""
    fenced = health.lift(t, c.target)
    if t.set_node(c.target, NodeState.READY) is not None:
        lifted = "; quarantine lifted, its failures forgotten" if fenced else ""
        t.event(None, "node", f"node {c.target} restored: ready for replicas{lifted}")


def _node_back(t: Tick, c: Command) -> None:
    """The backend sees a lost node again: READY, but a quarantine stays until restored."""
    node = t.set_node(c.target, NodeState.READY)
    if node is not None and node.fence:
        t.event(None, "node", f"node {c.target} is back but stays QUARANTINED "
                              f"({node.fence}); `perdure node restore {c.target}` lifts it")
    elif node is not None:
        t.event(None, "node", f"node {c.target} restored: ready for replicas")


COMMANDS: dict[str, Callable[[Tick, Command], None]] = {
    "submit": _submit,
    "cancel": _cancel,
    "preempt": _preempt,
    "resume": _resume,
    "fail-node": _fail_node,
    "preempt-node": _preempt_node,
    "drain-node": _drain_node,
    "restore-node": _restore_node,
    "node-back": _node_back,
}
