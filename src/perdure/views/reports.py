"""Read what replicas reported (the backend's launch records) and account goodput.

The account follows one replica's launches: the primary's, or for an elastic job the replica
that was relaunched least (a survivor: the job went on in it while others were replaced).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from perdure.backends.base import Inspector
from perdure.core.goodput import Goodput, LaunchReport, account
from perdure.core.model import Job
from perdure.store.schema import StoredEvent
from perdure.views.jobview import clock

ROUND = re.compile(r"^round (\d+): (.*)$")
# Both sides of a hot-swap: (event kind, message prefix, what the time to RUNNING again is)
HOT_SWAP = (("decision", "hot-swap:", "until RUNNING again"),
            ("state", "SUSPENDING: hot-swap:", "preempted until RUNNING (not counted)"))

STATE_KINDS = ("state", "running")


def replica_launches(inspector: Inspector, job: Job, replica: str) -> list[LaunchReport]:
    return [LaunchReport(r.launched, r.exited, r.progress)
            for r in inspector.launch_records(job.id, replica)]


def accounted_launches(inspector: Inspector, job: Job) -> list[LaunchReport]:
    """The primary's launches; for an elastic job, those of the replica launched least."""
    if not job.elastic:
        return replica_launches(inspector, job, job.primary.name)
    by_replica = [replica_launches(inspector, job, r.name) for r in job.replicas]
    return min(by_replica, key=lambda launches: len(launches) or len(job.replicas) + 1)


def goodput(inspector: Inspector, job: Job, events: list[StoredEvent]) -> Goodput:
    timeline = [(e.time, e.message.split(":", 1)[0]) for e in events if e.kind in STATE_KINDS]
    return account(accounted_launches(inspector, job), timeline, time.time())


@dataclass(frozen=True)
class ElasticChange:
    """A shrink, grow, pause or hot-swap of a job, why, and what it cost the job."""

    time: float
    what: str  # the event's message: its reason
    cost_s: float | None  # the group's rebuild (rounds) or the wait to run again (hot-swap)
    cost: str  # what cost_s measures, or why there is none


def elastic_changes(inspector: Inspector, job: Job,
                    events: list[StoredEvent]) -> list[ElasticChange]:
    """Membership rounds after the first and hot-swaps, each with its cost to the job: the
    accounted replica's group rebuild (none for a round superseded before it formed), or
    the time until it was RUNNING again."""
    rebuilt: dict[int, float] = {}
    for launch in accounted_launches(inspector, job):
        for rec in launch.records:
            if rec.get("kind") == "elastic":
                n = int(rec["round"])
                rebuilt[n] = rebuilt.get(n, 0.0) + float(rec["seconds"])
    out = []
    for i, e in enumerate(events):
        m = ROUND.match(e.message) if e.kind == "elastic" else None
        if m is not None and m.group(2).startswith("admitted"):
            continue
        if m is not None:
            n = int(m.group(1))
            seconds = rebuilt.get(n)
            out.append(ElasticChange(e.time, e.message, seconds, "group rebuilt" if seconds
                                     is not None else "no group of its own (superseded)"))
        elif (measure := first_match(HOT_SWAP, e)) is not None:
            back = next((x.time for x in events[i + 1:] if x.kind in STATE_KINDS
                         and x.message.startswith("RUNNING")), None)
            out.append(ElasticChange(e.time, e.message, None if back is None else back - e.time,
                                     measure if back is not None else "not running again yet"))
    return out


def first_match(table: tuple[tuple[str, str, str], ...], e: StoredEvent) -> str | None:
    """The value of the first (event kind, message prefix, value) row that `e` matches."""
    return next((v for kind, prefix, v in table
                 if e.kind == kind and e.message.startswith(prefix)), None)


def format_elastic(changes: list[ElasticChange], g: Goodput) -> list[str]:
    if not changes:
        return []
    lines = [f"Elastic changes ({len(changes)}; {g.badput.get('elastic', 0.0):.1f}s of badput "
             "rebuilding groups):"]
    for c in changes:
        cost = f"{c.cost_s:7.2f}s" if c.cost_s is not None else "      - "
        lines.append(f"  {clock(c.time)} {cost}  {c.what}  [{c.cost}]")
    return lines


def format_goodput(g: Goodput) -> list[str]:
    if g.goodput is None:
        return [f"Goodput: {g.status}" + (f" ({g.running:.1f}s running; report steps with "
                                          "perdure.runtime.goodput.step)" if g.running else "")]
    lines = [f"Goodput: {g.goodput:.1%} ({g.productive:.1f}s productive of {g.running:.1f}s "
             f"running; last step {g.last_step})"]
    for k, v in g.badput.items():
        lines.append(f"  badput {k:<19} {v:8.1f}s")
    lines.append(f"  queued {g.queued:.1f}s, suspended {g.suspended:.1f}s (not counted)")
    return lines
