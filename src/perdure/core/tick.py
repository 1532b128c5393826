"""A tick's context, shared by decide and its helpers: the snapshot it starts from, its own
copies and the moves they share. No side effects: it records decisions and events.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from perdure.core.counts import ALIVE
from perdure.core.events import Decision, KillNode, Stop
from perdure.core.launchenv import LaunchSettings, build_launch, launch_id
from perdure.core.layout import Layout, gpu_env, key_of
from perdure.core.model import Job
from perdure.core.records import Event, Node
from perdure.core.replica import Replica
from perdure.core.resume import STARTS_OVER, from_the_beginning, says_it_resumes
from perdure.core.states import JobState, NodeState, ReplicaState

_NAME = operator.attrgetter("name")
_RANK = operator.attrgetter("rank")


@dataclass(frozen=True)
class JobIndex:
    """Ids of the jobs the scheduler must look at, updated from the jobs each tick changed."""

    queued: frozenset[str]
    placing: frozenset[str]
    launching: frozenset[str] = frozenset()

    @staticmethod
    def of(jobs: Mapping[str, Job]) -> JobIndex:
        return JobIndex(
            frozenset(i for i, j in jobs.items() if j.awaiting_admission),
            frozenset(i for i, j in jobs.items() if needs_placement(j)),
            frozenset(i for i, j in jobs.items() if j.unlaunched or j.unstopped),
        )

    def updated(self, jobs: Mapping[str, Job], changed: Iterable[str]) -> JobIndex:
        queued, placing, launching = set(self.queued), set(self.placing), set(self.launching)
        for i in changed:
            job = jobs.get(i)
            (queued.add if job and job.awaiting_admission else queued.discard)(i)
            (placing.add if job and needs_placement(job) else placing.discard)(i)
            (launching.add if job and (job.unlaunched or job.unstopped)
             else launching.discard)(i)
        return JobIndex(frozenset(queued), frozenset(placing), frozenset(launching))


def needs_placement(job: Job) -> bool:
    """A started job with WAITING replicas not placed already (`Scratch.plan`)."""
    if not ((job.state in (JobState.PENDING, JobState.RUNNING) or job.in_backend_queue)
            and job.after_stop is None):
        return False
    return job.count(ReplicaState.WAITING) > len(job.scratch.plan)


@dataclass(frozen=True)
class Snapshot:
    jobs: Mapping[str, Job]  # unfinished jobs (the shell drops terminal ones after commit)
    nodes: Mapping[str, Node]
    quotas: Mapping[str, int | None]
    index: JobIndex | None = None  # None: computed from `jobs`
    layouts: Mapping[str, Layout] = field(default_factory=dict)  # never stored

    def job_index(self) -> JobIndex:
        return self.index if self.index is not None else JobIndex.of(self.jobs)


@dataclass
class Tick:
    """One tick: its copies of the jobs and nodes, its decisions and events, its moves."""

    snap: Snapshot
    now: float
    settings: LaunchSettings
    jobs: dict[str, Job] = field(init=False)
    nodes: dict[str, Node] = field(init=False)
    layouts: dict[str, Layout] = field(init=False)
    decisions: list[Decision] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)
    nodes_changed: bool = False
    active: bool = False  # something changed capacity or demand: run admission
    launch_budget: int = 64  # replicas admitted per tick
    note_budget: int = 32  # wait reasons recorded per tick
    sent: int = 0  # launches and stops decided so far (core.plan sends the rest up to a limit)

    def __post_init__(self) -> None:
        self.jobs = dict(self.snap.jobs)
        self.nodes = dict(self.snap.nodes)
        self.layouts = dict(self.snap.layouts)

    def touch(self, job_id: str) -> Job | None:
        """The tick's own copy of a job, cloned on first touch."""
        job = self.jobs.get(job_id)
        if job is None:
            return None
        if job_id not in self.changed:
            job = job.clone()
            self.jobs[job_id] = job
            self.changed.add(job_id)
        job.updated = self.now
        return job

    def mine(self, job_id: str) -> Job:
        job = self.touch(job_id)
        assert job is not None
        return job

    def event(self, job: Job | None, kind: str, message: str) -> None:
        self.events.append(Event(self.now, job.id if job else None, kind, message))

    def set_node(self, name: str, state: NodeState) -> Node | None:
        node = self.nodes.get(name)
        if node is None:
            return None
        self.nodes[name] = dataclasses.replace(node, state=state)
        self.nodes_changed = self.active = True
        return self.nodes[name]

    def drop_plan(self, job: Job) -> None:
        """Forget the launches and stops still to send, and their layout."""
        job.scratch.plan, job.unlaunched, job.unstopped = (), 0, []
        self.layouts.pop(job.id, None)

    def index(self) -> JobIndex:
        return self.snap.job_index().updated(self.jobs, self.changed)

    def restart(self, job: Job, moved: list[Replica], notice: str | None, why: str) -> None:
        """Start `moved` again; in group scope every replica joins a new rendezvous round."""
        job.state = JobState.PENDING
        grace = job.spec.restart.round_grace_seconds
        if notice == "maintenance":
            grace = job.spec.preemption.grace_seconds
        names = {r.name for r in moved}
        group = job.spec.restart.scope == "group" and not job.elastic
        if group:
            job.round += 1
            self.drop_plan(job)  # the new round places and launches them all again
        budget = self.settings.launches_per_tick
        later: list[int] = []
        for x, state in zip(job.replicas, job.states(), strict=True):
            if not group and x.name not in names:
                continue
            alive = state in ALIVE
            if alive and budget is not None and budget <= 0 and (
                    state is not ReplicaState.STOPPING) and x.name not in names:
                later.append(x.rank)
            elif alive:
                budget = None if budget is None else budget - 1
                self.sent += 1
                self.stop(job, x, grace, f"{why}: new round {job.round}", relaunch=True,
                          notice=notice if x.name in names else None)
            elif state is ReplicaState.EXITED:
                job.own(x).state = ReplicaState.WAITING
        if group:
            job.unstopped = later

    def move_off(self, node: str, what: str, why: str) -> None:
        """Move every live replica on `node` elsewhere under a maintenance notice."""
        for job_id, seen in list(self.jobs.items()):
            if seen.after_stop is not None or not any(
                    r.node == node and r.alive for r in seen.replicas):
                continue
            job = self.mine(job_id)
            moving = [r for r in job.replicas if r.node == node and r.alive]
            names = ", ".join(r.name for r in moving)
            self.event(job, "decision", f"move {names} off node {node} ({what}, no restart)")
            self.restart(job, moving, notice="maintenance", why=why)

    def unblame(self, job: Job) -> Replica:
        """Give back the restart this round charged to `job.blame`; the blamed replica."""
        assert job.blame is not None
        blamed = job.own(next(x for x in job.replicas if x.name == job.blame.replica))
        blamed.restarts = max(0, blamed.restarts - 1)
        job.blame = None
        return blamed

    def stop(self, job: Job, r: Replica, grace: float, reason: str, *, relaunch: bool = False,
             notice: str | None = None, delay: float = 0.0) -> None:
        """Stop `r`: SIGTERM after `delay`, SIGKILL `grace` seconds later."""
        r = job.own(r)
        if r.state is ReplicaState.STOPPING or r.launch_id is None:
            r.relaunch = r.relaunch or relaunch
            return
        r.state, r.relaunch, r.notice = ReplicaState.STOPPING, relaunch, notice
        self.decisions.append(Stop(r.launch_id, int(signal.SIGTERM), grace, reason, notice,
                                   delay))

    def end(self, job: Job, final: JobState, notice: str | None = None) -> None:
        """Stop every replica; the job becomes `final` once all are down."""
        job.after_stop = final
        self.drop_plan(job)
        grace = (job.spec.preemption.grace_seconds if notice
                 else job.spec.restart.stop_grace_seconds)
        for x in job.own_all():
            if x.alive and final is JobState.SUCCEEDED:
                # The other ranks finish as the primary did, within their pool's grace.
                self.stop(job, x, grace, "the primary succeeded: finishing",
                          delay=pool_grace(job, x))
            elif x.alive:
                self.stop(job, x, grace, f"job ending ({final.value})", notice=notice)
            elif x.state is ReplicaState.WAITING:
                x.state = ReplicaState.EXITED
            x.relaunch = False
        self.maybe_finish(job)

    def maybe_finish(self, job: Job) -> None:
        if job.after_stop is None or any(r.alive for r in job.replicas):
            return
        final, job.after_stop = job.after_stop, None
        job.waiting_since = None
        job.spares = {}  # an ended attempt holds nothing
        job.backend_queue = ""
        if final is JobState.QUEUED or final is JobState.SUSPENDED:
            self.reset(job)
        if final is JobState.QUEUED:
            job.state = JobState.QUEUED
            self.event(job, "state", f"QUEUED: attempt {job.attempt} ended; retrying")
        elif final is JobState.SUSPENDED:
            job.state = JobState.SUSPENDED
            self.event(job, "state", "SUSPENDED: every replica is down; capacity released")
            if not job.hold:
                job.state = JobState.QUEUED
                self.event(job, "state", "QUEUED: requeued to resume from its checkpoint")
        else:
            job.state = final
            tail = f": {job.error.code.value}: {job.error.message}" if job.error else ""
            if job.error and final is JobState.CANCELLED:
                tail = f": {job.error.message}"  # not "CANCELLED: CANCELLED: ..."
            self.event(job, "state", f"{final.value}{tail}")
        self.active = True

    def reset(self, job: Job) -> None:
        self.drop_plan(job)
        for x in job.own_all():
            x.restarts_before += x.restarts
            x.state, x.node, x.restarts, x.exit_code = ReplicaState.WAITING, None, 0, None
            x.relaunch, x.notice = False, None
        job.round = 0
        job.members = ()

    def launch(self, job: Job, placed: Mapping[str, str],
               devices: Mapping[str, list[int]] | None = None) -> None:
        """Launch the replicas named in `placed` under one layout; beyond `launches_per_tick`
        the rest become the job's plan, sent by the next ticks (core.plan)."""
        gpus = devices or {}
        todo = job.named(placed)
        limit = self.settings.launches_per_tick
        kept = self.layouts.get(job.id)
        if kept is not None and kept.key == key_of(job):
            self.layouts[job.id] = kept.moved(job, placed)
        elif limit is not None and len(job.replicas) > limit:
            self.layouts.pop(job.id, None)
            self._plan(job, todo, placed, gpus)
            return
        else:
            self.layouts[job.id] = Layout.of(job, placed, job.scratch.plan)
        if limit is not None and len(todo) > limit:
            self._plan(job, todo[limit:], placed, gpus)
            todo = todo[:limit]
        self.send(job, [(r, placed[r.name], list(gpus.get(r.name, ()))) for r in todo])

    @staticmethod
    def _plan(job: Job, rest: list[Replica], placed: Mapping[str, str],
              gpus: Mapping[str, list[int]]) -> None:
        names = list(map(_NAME, rest))
        held = (list(map(tuple, map(gpus.get, names, itertools.repeat(())))) if gpus
                else [()] * len(rest))
        plan = job.scratch.plan + tuple(zip(map(_RANK, rest), map(placed.__getitem__, names),
                                            held, strict=True))
        job.scratch.plan, job.unlaunched = plan, len(plan)

    def send(self, job: Job, batch: list[tuple[Replica, str, list[int]]]) -> None:
        mine = []
        for r, node, gpus in batch:
            r = job.own(r)
            r.node, r.devices = node, gpus
            mine.append(r)
        kept = self.layouts.get(job.id)
        if kept is None:
            kept = self.layouts[job.id] = Layout.of(job, planned=job.scratch.plan)
        layout = dataclasses.replace(kept, devices=gpu_env(job, self.nodes, mine))
        self.sent += len(mine)
        self._starts_over(job, [r for r in mine if r.launches])
        for r in mine:
            r.launches += 1
            r.launch_id = launch_id(job, r)
            r.state = ReplicaState.STARTING
            self.decisions.append(build_launch(job, r, self.settings, layout))

    def _starts_over(self, job: Job, again: list[Replica]) -> None:
        """Say so when relaunched replicas have nothing that makes their script resume."""
        pools = {p.name: p for p in job.spec.pools}
        lost = [r.name for r in again if not says_it_resumes(job, pools[r.pool])]
        if lost:
            self.event(job, STARTS_OVER, from_the_beginning(job, lost, self.now))

    def kill_node(self, name: str) -> None:
        self.decisions.append(KillNode(name))


def pool_grace(job: Job, r: Replica) -> float:
    """The seconds `r` gets to finish by itself once the primary succeeded."""

    return next((p.grace for p in job.spec.pools if p.name == r.pool), 0.0)
