"""Stragglers: a replica whose steps stay clearly slower than the others'.

No side effects. Two rules (docs/guides/watchdog.md), each reporting a replica once per round
until it recovers: its mean step time over WINDOW_STEPS steps exceeds RATIO x the others'
median; or, where synchronous ranks all report the same step time, it was outside any
collective in more than OUTSIDE_SHARE of at least SAMPLES_NEEDED stack samples (`sampled`)
while the others waited in one.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from perdure.core.events import Command, ReplicaProgress
from perdure.core.model import Job
from perdure.core.records import Node
from perdure.core.states import NodeState
from perdure.core.watchdog import running_launches

WINDOW_STEPS = 50
RATIO = 1.5
SAMPLES_NEEDED = 10
OUTSIDE_SHARE = 0.75


@dataclass
class _Times:
    """A replica's recent step times as (steps, seconds per step) reports, WINDOW_STEPS long."""

    reports: deque[tuple[int, float]] = field(default_factory=deque)
    steps: int = 0

    def add(self, count: int, seconds: float) -> None:
        self.reports.append((count, seconds))
        self.steps += count
        while self.reports and self.steps - self.reports[0][0] >= WINDOW_STEPS:
            self.steps -= self.reports.popleft()[0]

    def mean(self) -> float:
        return sum(c * s for c, s in self.reports) / max(1, self.steps)


@dataclass(frozen=True)
class Straggler:
    job_id: str
    replica: str
    node: str
    launch_id: str
    seconds: float  # its mean step time over the window
    others: float  # the median of the other replicas' means
    why: str = ""  # the stack-sampling rule's finding, when that rule named it

    def message(self) -> str:
        if self.why:
            return f"straggler: {self.replica} on node {self.node} {self.why}"
        return (f"straggler: {self.replica} on node {self.node} takes {self.seconds:.3f}s per "
                f"step over its last {WINDOW_STEPS} steps, {self.seconds / self.others:.1f}x the "
                f"others' median {self.others:.3f}s (rule: > {RATIO}x over {WINDOW_STEPS} steps)")


@dataclass
class _Round:
    launches: frozenset[str]
    times: dict[str, _Times] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)  # by the step-time rule
    sampled_out: set[str] = field(default_factory=set)  # by the stack-sample rule (once)
    telling: int = 0  # stack samples with ranks both inside and outside a collective
    outside: dict[str, int] = field(default_factory=dict)  # launch id -> such samples outside


def drain(job: Job, s: Straggler, nodes: Mapping[str, Node],
          now: float) -> tuple[Command | None, str]:
    """`stragglers: drain`: the drain of the straggler's node when another node is ready,
    and what the straggler's event adds about it."""
    if job.spec.watchdog.stragglers != "drain":
        return None, ""
    node = nodes.get(s.node)
    if node is None or node.state is not NodeState.READY:
        return None, f"; node {s.node} is not ready: nothing to drain"
    if not any(n.state is NodeState.READY for n in nodes.values() if n.name != s.node):
        return None, f"; not drained: no other node is ready to take {s.replica}"
    return Command("drain-node", s.node, now), (
        f"; draining node {s.node}: {s.replica} moves at its next checkpoint "
        f"(`perdure node restore {s.node}` takes the node back)")


class Stragglers:
    def __init__(self) -> None:
        self.jobs: dict[str, _Round] = {}

    def progress(self, job: Job, obs: ReplicaProgress) -> None:
        launches = running_launches(job)
        if launches is None or obs.launch_id not in launches or not obs.steps:
            return
        rnd = self._round(job.id, launches)
        if obs.step_seconds is not None:
            rnd.times.setdefault(obs.launch_id, _Times()).add(obs.steps, obs.step_seconds)

    def sampled(self, job: Job, inside: Mapping[str, bool]) -> None:
        """One stack sample of a round: launch id -> whether that rank was in a collective."""
        launches = running_launches(job)
        if launches is None or set(inside) != launches or len(set(inside.values())) < 2:
            return
        rnd = self._round(job.id, launches)
        rnd.telling += 1
        for lid, waiting in inside.items():
            rnd.outside[lid] = rnd.outside.get(lid, 0) + (not waiting)

    def check(self, jobs: Mapping[str, Job]) -> list[Straggler]:
        out = []
        for job_id in list(self.jobs):
            job, rnd = jobs.get(job_id), self.jobs[job_id]
            if job is None or job.state.terminal:
                del self.jobs[job_id]
                continue
            if job.spec.watchdog.stragglers == "off" or running_launches(job) != rnd.launches:
                continue
            out.extend(self._by_times(job, rnd) or self._by_samples(job, rnd))
        return out

    def _round(self, job_id: str, launches: frozenset[str]) -> _Round:
        rnd = self.jobs.get(job_id)
        if rnd is None or rnd.launches != launches:
            rnd = self.jobs[job_id] = _Round(launches)
        return rnd

    def _by_samples(self, job: Job, rnd: _Round) -> list[Straggler]:
        if rnd.telling < SAMPLES_NEEDED:
            return []
        share = {lid: rnd.outside.get(lid, 0) / rnd.telling for lid in rnd.launches}
        out = []
        for r in job.replicas:
            lid = r.launch_id or ""
            others = [v for x, v in share.items() if x != lid]
            if (share[lid] > OUTSIDE_SHARE and max(others) <= 1 - OUTSIDE_SHARE
                    and lid not in rnd.sampled_out):
                rnd.sampled_out.add(lid)
                why = (f"was outside any collective in {rnd.outside.get(lid, 0)} of "
                       f"{rnd.telling} stack samples while the others waited in one (rule: "
                       f"> {OUTSIDE_SHARE:.0%} of at least {SAMPLES_NEEDED} samples)")
                out.append(Straggler(job.id, r.name, r.node or "?", lid, 0.0, 0.0, why))
        return out

    def _by_times(self, job: Job, rnd: _Round) -> list[Straggler]:
        if len(rnd.launches) < 2 or any(
                rnd.times.get(lid, _Times()).steps < WINDOW_STEPS for lid in rnd.launches):
            return []
        means = {lid: rnd.times[lid].mean() for lid in rnd.launches}
        out = []
        for r in job.replicas:
            lid = r.launch_id or ""
            others = statistics.median(m for x, m in means.items() if x != lid)
            if means[lid] <= RATIO * others:
                rnd.reported.discard(lid)  # recovered: may be reported again
            elif lid not in rnd.reported:
                rnd.reported.add(lid)
                out.append(Straggler(job.id, r.name, r.node or "?", lid, means[lid], others))
        return out
