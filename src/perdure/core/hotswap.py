"""Hot-swap: a running job that lost capacity takes it from a lower-priority job.

No side effects: picks victims and suspends them through the tick.
"""

from __future__ import annotations

from perdure.core.commands import suspend
from perdure.core.events import Command
from perdure.core.model import Job
from perdure.core.scheduler import Capacity
from perdure.core.states import JobState, ReplicaState
from perdure.core.tick import Tick


def _held_on_ready(job: Job, cap: Capacity) -> int:
    return sum(s for node, s in job.usage.items() if node in cap.ready)


def _gpus_on_ready(job: Job, cap: Capacity) -> int:
    return sum(len(held) for node, held in job.gpu_usage.items() if node in cap.ready)


def lost_work(job: Job, now: float) -> float:
    """Slot-seconds a preemption would throw away: time since its last checkpoint x slots."""
    since = job.last_checkpoint if job.last_checkpoint is not None else job.created
    return max(0.0, now - since) * job.slots


def _least(victim: Job, t: Tick) -> str:
    """Why this victim among jobs of its priority: it loses least work (when there was a choice)."""
    peers = [j for j in t.jobs.values() if j.priority == victim.priority and j.id != victim.id
             and j.after_stop is None and j.state in (JobState.PENDING, JobState.RUNNING)]
    if not peers:
        return ""
    return (f"; of {len(peers) + 1} jobs at priority {victim.priority} it loses least work: "
            f"{lost_work(victim, t.now):.0f} slot-seconds since its last checkpoint")


def hot_swap(t: Tick, cap: Capacity, job: Job) -> bool:
    """Free capacity for `job`'s waiting replicas by preempting lower-priority jobs; whether
    enough is (or will soon be) freed, so the job waits instead of timing out."""
    waiting = [r for r in job.replicas if r.state is ReplicaState.WAITING]
    need = sum(r.slots for r in waiting) - cap.free
    need_gpus = sum(r.gpus for r in waiting) - cap.free_gpus()
    if need <= 0 and need_gpus <= 0:
        return False  # free slots exist but do not fit (fragmented, avoided node): just wait
    # Jobs already on their way out (suspending, cancelling, ending) free their slots soon.
    leaving = [j for j in t.jobs.values() if j.id != job.id and j.after_stop is not None]
    need -= sum(_held_on_ready(j, cap) for j in leaving)
    need_gpus -= sum(_gpus_on_ready(j, cap) for j in leaving)
    if need <= 0 and need_gpus <= 0:
        return True
    candidates = sorted(
        (j for j in t.jobs.values()
         if j.priority < job.priority and j.after_stop is None
         and j.state in (JobState.PENDING, JobState.RUNNING)
         and (_held_on_ready(j, cap) > 0 if need > 0 else _gpus_on_ready(j, cap) > 0)),
        # lowest priority first; among equals the one that loses least work, then youngest
        key=lambda j: (j.priority, lost_work(j, t.now), -j.created),
    )
    victims: list[Job] = []
    for j in candidates:
        victims.append(j)
        need -= _held_on_ready(j, cap)
        need_gpus -= _gpus_on_ready(j, cap)
        if need <= 0 and need_gpus <= 0:
            break
    if need > 0 or need_gpus > 0:
        return False  # even preempting every lower-priority job would not be enough
    for seen in victims:
        victim = t.mine(seen.id)
        why = f"hot-swap: capacity goes to {job.id} (priority {job.priority} > {victim.priority})"
        t.event(job, "decision", f"hot-swap: preempting {victim.id} (priority "
                                 f"{victim.priority}) to take its capacity{_least(seen, t)}")
        suspend(t, victim, Command("preempt", victim.id, t.now), why)
    return True
