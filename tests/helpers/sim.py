"""A pure simulation harness: decide() + the fake backend + a fake clock (no processes)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from perdure.backends.base import NodeInfo
from perdure.backends.fake import FakeBackend, FakeRun, Script
from perdure.core.decide import Outcome, decide
from perdure.core.events import Command, KillNode, Launch, LaunchFailed, Observation, Stop
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job
from perdure.core.records import Event, Node
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec, parse_job_spec
from perdure.core.states import JOB_TRANSITIONS, REPLICA_TRANSITIONS, JobState
from perdure.core.tick import Snapshot

SETTINGS = LaunchSettings(state_dir="/state", python="/usr/bin/python3")

_JOB_NEXT = {a: {b for b, _ in out} for a, out in JOB_TRANSITIONS.items()}
_REPLICA_NEXT = {a: {b for b, _ in out} for a, out in REPLICA_TRANSITIONS.items()}


def _reachable(graph: dict[Any, set[Any]], a: Any, b: Any) -> bool:
    """Whether `b` is `a` or follows from it through allowed transitions (a tick may take a
    job through several, e.g. SUSPENDED -> QUEUED)."""
    seen, todo = {a}, [a]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return a == b or b in seen


def check_transitions(before: dict[str, Job], after: dict[str, Job]) -> None:
    """Every state change of a tick is one that core/states.py declares."""
    for job_id, was in before.items():
        now = after.get(job_id)
        if now is None:
            continue
        assert _reachable(_JOB_NEXT, was.state, now.state), \
            f"{job_id}: {was.state.value} -> {now.state.value} is not in JOB_TRANSITIONS"
        old = {r.name: r.state for r in was.replicas}
        for r in now.replicas:
            if r.name in old:
                assert _reachable(_REPLICA_NEXT, old[r.name], r.state), \
                    f"{r.name}: {old[r.name].value} -> {r.state.value} not in REPLICA_TRANSITIONS"


def spec(text: str = "", **fields: object) -> JobSpec:
    pool = {"name": "worker", "replicas": 1, "command": ["python", "t.py"]}
    base = {"name": "job", "pools": [pool]}
    if text:
        return parse_job_spec(text)
    return JobSpec.model_validate({**base, **fields})


@dataclass
class Sim:
    nodes: dict[str, int] = field(default_factory=lambda: {"local": 4})
    quotas: dict[str, int | None] = field(default_factory=lambda: {"default": None})
    script: Script = lambda launch: FakeRun()
    now: float = 1000.0
    settings: LaunchSettings = SETTINGS

    def __post_init__(self) -> None:
        self.backend = FakeBackend([NodeInfo(n, s) for n, s in self.nodes.items()],
                                   self.script, clock=lambda: self.now)
        self.snap = Snapshot({}, {n: Node(n, s) for n, s in self.nodes.items()}, self.quotas)
        self.pending: list[Observation] = []
        self.events: list[Event] = []
        self.ids = itertools.count(1)
        self.finished: dict[str, Job] = {}

    def submit(self, s: JobSpec) -> str:
        job_id = f"{s.name}-{next(self.ids)}"
        job = Job(job_id, s, "/work", self.now, replicas=make_replicas(s))
        self.snap = replace(self.snap, jobs={**self.snap.jobs, job_id: job})
        self.pending.append(Command("submit", job_id, self.now))
        return job_id

    def command(self, kind: str, target: str, hold: bool = False) -> None:
        self.pending.append(Command(kind, target, self.now, hold))

    def job(self, job_id: str) -> Job:
        return self.snap.jobs.get(job_id) or self.finished[job_id]

    def step(self, dt: float = 0.1) -> Outcome:
        self.now += dt
        obs = self.pending + self.backend.poll()
        self.pending = []
        # decide never changes what it was given (copy on write: a tick changes its own
        # copies only); checked on every step of every scenario small enough to cost nothing
        small = sum(len(j.replicas) for j in self.snap.jobs.values()) <= 64
        given = {i: j.to_json() for i, j in self.snap.jobs.items()} if small else {}
        before = dict(self.snap.jobs) if small else {}
        out = decide(self.snap, obs, self.now, self.settings)
        assert all(self.snap.jobs[i].to_json() == d for i, d in given.items()), \
            "decide changed a job of the snapshot it was given"
        check_transitions(before, out.snapshot.jobs)
        self.events.extend(out.events)
        for d in out.decisions:
            if isinstance(d, Launch):
                try:
                    self.backend.launch(d)
                except Exception as exc:  # the controller's executor does the same
                    self.pending.append(LaunchFailed(d.launch_id, str(exc), self.now))
            elif isinstance(d, Stop):
                self.backend.stop(d)
            elif isinstance(d, KillNode):
                self.backend.kill_node(d.node)
        jobs = {}
        for i, j in out.snapshot.jobs.items():
            if j.state.terminal:
                self.finished[i] = j
            else:
                jobs[i] = j
        self.snap = replace(out.snapshot, jobs=jobs)
        return out

    def run_until(self, job_id: str, states: set[JobState], steps: int = 500,
                  dt: float = 0.1) -> Job:
        for _ in range(steps):
            self.step(dt)
            if self.job(job_id).state in states:
                return self.job(job_id)
        raise AssertionError(f"{job_id} never reached {states}: {self.job(job_id).state}")

    def messages(self, job_id: str | None = None) -> list[str]:
        return [e.message for e in self.events if job_id is None or e.job_id == job_id]
