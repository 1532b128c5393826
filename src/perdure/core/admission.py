"""The scheduling half of a tick: place waiting replicas of running jobs, admit queued jobs.

No side effects: works on the tick's copies and records launches and events.
"""

from __future__ import annotations

from perdure.core import plan, spares
from perdure.core.elastic import may_wait_forever, publish
from perdure.core.hotswap import hot_swap
from perdure.core.model import Job, JobError
from perdure.core.policy import retry_budget
from perdure.core.scheduler import Capacity, admission_order, can_ever_fit, shortfall_message
from perdure.core.states import ErrorCode, JobState, NodeState
from perdure.core.text import plural, some_of
from perdure.core.tick import Tick


def schedule(t: Tick) -> None:
    """Place first what running jobs lost, then admit by priority and age; check the timers."""
    index = t.index()
    for i in sorted(index.launching):
        plan.step(t, i)
    if index.launching:
        index = t.index()
    waiting = [t.jobs[i] for i in index.placing]
    queued = [t.jobs[i] for i in index.queued]
    due = [j for j in queued + waiting if j.waiting_since is not None and _timer_due(t, j)]
    if (t.active and (waiting or queued)) or due:
        holding = (j for i, j in t.jobs.items() if i not in index.queued)
        cap = Capacity(t.nodes, t.snap.quotas, holding)
        for job in admission_order(waiting):
            _place_waiting(t, cap, job.id)
        for job in admission_order(queued):
            _admit(t, cap, job)
    spares.let_go_unfit(t)
    short = [j for j in t.jobs.values() if spares.short(j)]
    if short:
        held = [j for i, j in t.jobs.items() if i not in index.queued]
        spares.seek(t, Capacity(t.nodes, t.snap.quotas, held), short)
    _settle_drains(t)


def _timer_due(t: Tick, job: Job) -> bool:
    limit = job.spec.scheduling.placement_timeout_seconds
    return job.waiting_since is not None and t.now - job.waiting_since >= limit


def _kind(reason: str) -> str:
    """A wait reason's kind ("waiting for quota"): its details change every tick."""
    return reason.split(":", 1)[0]


def _wait(t: Tick, job: Job, reason: str) -> None:
    """Note why a job waits, with an event when the kind changes, naming quarantined nodes."""
    if _kind(job.wait_reason) != _kind(reason):
        fenced = sorted(n.name for n in t.nodes.values() if n.fence)  # once per new reason
        if fenced:
            reason += (f" ({some_of(fenced)} quarantined: `perdure node ls` says why, "
                       "`perdure node restore` lifts it)")
        job.wait_reason = reason
        t.event(job, "waiting", reason)


def _place_waiting(t: Tick, cap: Capacity, job_id: str) -> None:
    job = t.mine(job_id)
    todo = job.unplaced()
    chosen = cap.place(todo, prefer=spares.lend(cap, job, todo))
    spares.settle(t, cap, job, chosen)
    if chosen is None:
        if job.waiting_since is None:
            job.waiting_since = t.now
        if may_wait_forever(job):
            job.waiting_since = None
            _wait(t, job, "waiting for capacity to grow back: running on fewer replicas")
            hot_swap(t, cap, job)
        elif hot_swap(t, cap, job):
            _wait(t, job, "waiting for hot-swap: a lower-priority job is giving its capacity")
        elif _timer_due(t, job):
            _capacity_timeout(t, job, cap, in_attempt=True)
        else:
            names = ", ".join(r.name for r in todo)
            _wait(t, job, f"waiting for capacity to place {names}")
        return
    job.waiting_since, job.wait_reason = None, ""
    t.launch(job, {r.name: chosen[r.name] for r in todo}, cap.devices)
    where = some_of([f"{r.name} on {chosen[r.name]}" for r in todo])
    t.event(job, "launch", f"launch {where} (attempt {job.attempt}, round {job.round})")


def _admit(t: Tick, cap: Capacity, seen: Job) -> None:
    """Admit a queued job when quota and capacity allow; touch it only when something changes."""
    if seen.wait_reason and seen.waiting_since is None and seen.slots > cap.free:
        return  # still waiting, as it already says: nothing to change
    if t.launch_budget <= 0:
        return  # bounded work per tick: the rest is admitted in the next ticks
    if not can_ever_fit(seen, cap):
        job = t.mine(seen.id)
        if job.waiting_since is None:
            job.waiting_since = t.now
        if _timer_due(t, job):
            _capacity_timeout(t, job, cap, in_attempt=False)
        else:
            _wait(t, job, "waiting: " + shortfall_message(job, cap.healthy,
                                                          cap.healthy_gpus))
        return
    free_quota = cap.queue_free(seen.spec.queue)
    if free_quota is not None and free_quota < seen.slots:
        _note(t, seen, f"waiting for quota: queue {seen.spec.queue} has {max(free_quota, 0)} "
                       f"free slots of {t.snap.quotas[seen.spec.queue]}, need {seen.slots}")
        return
    chosen = cap.place(seen.replicas)
    if chosen is None:
        gpus = (f" and {plural(seen.spec.total_gpus, 'GPU')} ({cap.free_gpus()} GPUs free)"
                if seen.spec.total_gpus else "")
        _note(t, seen, f"waiting for capacity: need {plural(seen.slots, 'slot')}{gpus}, "
                       f"{max(cap.free, 0)} slots free of {cap.healthy}")
        return
    job = t.mine(seen.id)
    t.launch_budget -= len(job.replicas)
    cap.take_quota(job.spec.queue, job.slots)
    job.attempt += 1
    job.round, job.wait_reason = 0, ""
    job.waiting_since = None
    job.state = JobState.PENDING
    nodes = sorted(set(chosen.values()))
    t.event(job, "state", f"PENDING: attempt {job.attempt} admitted; launching "
                          f"{plural(len(job.replicas), 'replica')} on {some_of(nodes)}")
    big = t.settings.launches_per_tick is not None and (
        len(job.replicas) > t.settings.launches_per_tick)
    if job.elastic and not big:  # a big job's round: by the next tick (core.plan)
        publish(t, job, {r.name for r in job.replicas}, "admitted", where=chosen)
    t.launch(job, chosen, cap.devices)


def _note(t: Tick, seen: Job, reason: str) -> None:
    """Record a new wait reason (cloning the job only when it changed), `note_budget` a tick."""

    if _kind(seen.wait_reason) != _kind(reason) or seen.waiting_since is not None:
        if t.note_budget <= 0:
            return
        t.note_budget -= 1
        job = t.mine(seen.id)
        job.waiting_since = None
        _wait(t, job, reason)


def _capacity_timeout(t: Tick, job: Job, cap: Capacity, *, in_attempt: bool) -> None:
    """The bounded wait for capacity ran out: retry the job (at most 3 times), then fail."""
    code = ErrorCode.INSUFFICIENT_CAPACITY
    message = shortfall_message(job, cap.healthy, cap.healthy_gpus)
    job.error = JobError(code, message)
    spent = job.retries.get(code.value, 0)
    job.waiting_since = t.now
    if spent >= retry_budget(code, job.spec):
        t.event(job, "decision", f"fail job: {message} (retries exhausted)")
        if in_attempt:
            t.end(job, JobState.FAILED)
        else:
            job.state = JobState.FAILED
            t.event(job, "state", f"FAILED: {code.value}: {message}")
        return
    job.retries[code.value] = spent + 1
    t.event(job, "decision", f"retry job: {message} (retry {spent + 1} of "
                             f"{retry_budget(code, job.spec)})")
    if in_attempt:
        t.end(job, JobState.QUEUED)
    else:
        job.attempt += 1  # the attempt that could not be placed counts


def _settle_drains(t: Tick) -> None:
    draining = [n for n in t.nodes.values() if n.state is NodeState.DRAINING]
    for node in draining:
        busy = any(
            r.node == node.name and r.alive for j in t.jobs.values() for r in j.replicas
        )
        if not busy:
            t.set_node(node.name, NodeState.DRAINED)
            t.event(None, "node", f"node {node.name} drained: no replicas left on it")
