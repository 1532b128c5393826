"""Launches and stops sent over several ticks: beyond `launches_per_tick` the rest of a
placement is the job's plan (`Scratch.plan`), a group restart's stops `Job.unstopped`.

No side effects. A planned replica holds its slots and GPUs and stays WAITING until sent. Only
the plan's length is stored (`Job.unlaunched`): a controller that died mid-plan `replan`s.
"""

from __future__ import annotations

from perdure.core.elastic import publish
from perdure.core.model import Job
from perdure.core.text import plural
from perdure.core.tick import Tick


def step(t: Tick, job_id: str) -> None:
    """Send the next stops and launches of a job, or replan a plan the tick cannot send."""
    job = t.touch(job_id)
    if job is None:
        return
    limit = (t.settings.launches_per_tick or len(job.replicas)) - t.sent
    if limit <= 0:
        return  # this tick sent its share already
    if job.unstopped:
        stops, job.unstopped = job.unstopped[:limit], job.unstopped[limit:]
        grace = job.spec.restart.round_grace_seconds
        for rank in stops:
            if job.replicas[rank].alive:
                t.sent += 1
                t.stop(job, job.replicas[rank], grace, f"restart: new round {job.round}",
                       relaunch=True)
        limit -= len(stops)
    if not job.unlaunched or limit <= 0:
        return
    if not job.scratch.plan:
        replan(t, job, "the controller restarted before sending them")
        return
    if job.elastic and not job.members:
        # a big elastic job's round 0, published before its first launch
        publish(t, job, {r.name for r in job.replicas}, "admitted")
        return
    plan = job.scratch.plan
    batch, rest = plan[:limit], plan[limit:]
    lost = sorted({node for _, node, _ in batch
                   if node not in t.nodes or not t.nodes[node].schedulable})
    if lost:
        replan(t, job, f"node {', '.join(lost)} is no longer ready")
        return
    job.scratch.plan, job.unlaunched = rest, len(rest)
    t.send(job, [(job.replicas[rank], node, list(gpus)) for rank, node, gpus in batch])
    if not rest:
        t.event(job, "launch", f"launched the last {plural(len(batch), 'replica')} of the "
                               f"round (attempt {job.attempt}, round {job.round})")


def replan(t: Tick, job: Job, why: str) -> None:
    """The plan cannot be sent as placed: a group job starts a new round, another places
    the rest anew."""
    count = job.unlaunched
    t.drop_plan(job)
    t.active = True
    if job.after_stop is not None:
        return
    t.event(job, "decision", f"{plural(count, 'launch', 'launches')} of round {job.round} not "
                             f"sent: {why}")
    if job.spec.restart.scope == "group" and not job.elastic:
        t.restart(job, [], notice=None, why=f"{plural(count, 'launch', 'launches')} not sent")
