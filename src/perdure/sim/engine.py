"""The simulation: the real core's `decide` against replicas that are timers on a simulated clock.

Side effects: none outside the objects it builds. Events (a launch done, a stop done, a
failure, a repair, a detector firing) sit in a heap by time; at each event time the pending
observations go through `perdure.core.decide.decide` exactly as the controller's tick does,
and its decisions (launch, stop, kill node) become new events. Training between
interruptions is `training.Training`; the account is `perdure.core.goodput.account`.
"""

from __future__ import annotations

import heapq
import itertools
import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from perdure.core import interval
from perdure.core.decide import decide
from perdure.core.events import (
    Command,
    Hung,
    KillNode,
    Launch,
    Observation,
    ReplicaExited,
    ReplicaProgress,
    ReplicaStarted,
    Stop,
)
from perdure.core.goodput import Goodput, LaunchReport, account
from perdure.core.healthspec import HealthSpec
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job
from perdure.core.records import Node
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec
from perdure.core.states import JobState
from perdure.core.tick import Snapshot, needs_placement
from perdure.core.watchdog import Watchdog
from perdure.runtime.peerring import choose_peer
from perdure.sim.calibration import Calibration
from perdure.sim.failures import Draw
from perdure.sim.policies import Policy
from perdure.sim.training import Training

DEFAULT_INTERVAL_SECONDS = 1800.0  # a spec that sets no interval
# A quarantined node goes to a deep repair (an assumption: parts swapped after diagnosis,
# three days) and comes back healthy: restored, no longer a repeat offender.
FENCED_REPAIR_HOURS = 72.0
# Training's restore sources in the runtime's words (what a replica reports, and the
# controller's interval reads: only restores from the checkpoint set its interval)
REPORTED = {"checkpoint": interval.CHECKPOINT, "node-local snapshot": interval.SNAPSHOT_LOCAL,
            "peer snapshot": interval.SNAPSHOT_PEER, "the beginning": interval.SCRATCH}
WAKE_SECONDS = 30.0  # how often a job waiting for capacity is looked at again


@dataclass
class Proc:
    launch: Launch
    started: bool = False


@dataclass
class Counts:
    interruptions: int = 0
    restarts: int = 0
    retries: int = 0
    manual: int = 0
    node_losses: int = 0
    fenced: int = 0  # nodes quarantined
    lemon_hits: int = 0  # interruptions a repeat offender caused
    restores: dict[str, int] = field(default_factory=dict)


@dataclass
class Result:
    policy: Policy
    goodput: Goodput
    counts: Counts

    @property
    def ettr(self) -> float:
        """Productive time over the run's whole wall time (manual waits included)."""
        return self.goodput.productive / self.goodput.wall if self.goodput.wall else 0.0


class Engine:
    """One policy, one job, one failure draw, on a simulated clock."""

    def __init__(self, spec: JobSpec, nodes: dict[str, tuple[int, int]], draws: Iterable[Draw],
                 calib: Calibration, policy: Policy, seconds: float,
                 switch_nodes: int = 16, lemons: frozenset[str] = frozenset(),
                 lemon_kinds: frozenset[str] = frozenset()) -> None:
        self.spec, self.policy, self.calib = policy.apply(spec), policy, calib
        self.horizon, self.draws, self.switch_nodes = seconds, draws, switch_nodes
        self.node_order = list(nodes)
        self.node_pos = {n: i for i, n in enumerate(nodes)}
        self.snap = Snapshot({}, {n: Node(n, s, gpus=g) for n, (s, g) in nodes.items()},
                             {"default": None})
        self.now = 0.0
        self.heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self.seq = itertools.count()
        self.obs: list[Observation] = []
        self.procs: dict[str, Proc] = {}
        # every launch of a tick at once: the simulated clock charges launches their
        # calibrated cost, not the controller's spreading of a tick's CPU time
        self.settings = LaunchSettings(
            state_dir="/sim", python="python", launches_per_tick=None,
            health=HealthSpec() if policy.fencing else HealthSpec(max_node_failures=0))
        self.lemons, self.lemon_kinds = set(lemons), lemon_kinds
        self.train = Training(calib, policy.snapshots)
        self.watchdog = Watchdog()
        self.record, self.cluster = interval.JobRecord(), interval.Cluster()
        self.counts = Counts()
        self.timeline: list[tuple[float, str]] = []
        self.launches: list[LaunchReport] = []
        self.primary: tuple[float, list[dict[str, Any]]] | None = None  # launched, records
        self.hosted: set[str] = set()  # nodes whose warm pool this job has started
        self.spare_since: dict[str, float] = {}  # spare nodes the job holds, since when
        self.node_lost = False  # since the last start
        self.job_id = ""
        self.jobs = itertools.count(1)
        self.manual_seconds = 0.0
        self.waking = False

    # ---- the loop ------------------------------------------------------------------------

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), fn, args))

    def run(self) -> Result:
        self.at(0.0, self.submit)
        upcoming = iter(self.draws)  # one failure in the heap at a time: memory stays flat

        def failure(d: Draw) -> None:
            if (after := next(upcoming, None)) is not None:
                self.at(after.time, failure, after)
            self.fail(d)

        if (first := next(upcoming, None)) is not None:
            self.at(first.time, failure, first)
        while self.heap and self.heap[0][0] <= self.horizon:
            self.now = self.heap[0][0]
            while self.heap and self.heap[0][0] <= self.now:
                _, _, fn, args = heapq.heappop(self.heap)
                fn(*args)
            if self.obs:
                self.tick()
        self.now = self.horizon
        self.stop_training(self.horizon, keeps_snapshot=True)
        self.close_primary(self.horizon)
        g = account(self.launches, self.timeline, self.horizon)
        if self.manual_seconds:
            g.badput["manual"] = self.manual_seconds
            g.badput["recovery"] = max(0.0, g.badput["recovery"] - self.manual_seconds)
        return Result(self.policy, g, self.counts)

    def tick(self) -> None:
        obs, self.obs = self.obs, []
        before = self.job_state()
        out = decide(self.snap, obs, self.now, self.settings)
        for e in out.events:
            if e.kind == "decision" and e.message.startswith("restart"):
                self.counts.restarts += 1
            elif e.kind == "decision" and e.message.startswith("retry job"):
                self.counts.retries += 1
        warm_spares = {n for n, t in self.spare_since.items()
                       if self.now - t >= self.calib.launch_cold_seconds}
        jobs = {i: j for i, j in out.snapshot.jobs.items() if not j.state.terminal}
        held = jobs[self.job_id].spares if self.job_id in jobs else {}
        self.spare_since = {n: self.spare_since.get(n, self.now) for n in held}
        ended = [j for i, j in out.snapshot.jobs.items() if j.state.terminal]
        if out.nodes_changed:
            self.fenced(out.snapshot.nodes)
        self.snap = replace(out.snapshot, jobs=jobs)
        for d in out.decisions:
            if isinstance(d, Launch):
                self.launch(d, d.node in warm_spares)
            elif isinstance(d, Stop):
                self.at(self.now + min(self.calib.stop_seconds, d.grace), self.exited,
                        d.launch_id, 128 + signal.SIGTERM, signal.SIGTERM)
            elif isinstance(d, KillNode):
                for lid in self.launches_on([d.node]):
                    self.at(self.now, self.exited, lid, 128 + signal.SIGKILL, signal.SIGKILL)
        for job in ended:
            self.ended(job)
        after = self.job_state()
        if after != before:
            self.state_changed(after)
        if not self.waking and any(j.state is JobState.QUEUED or needs_placement(j)
                                   for j in jobs.values()):
            self.waking = True
            self.at(self.now + WAKE_SECONDS, self.wake)

    def fenced(self, nodes: Mapping[str, Node]) -> None:
        """Nodes the core quarantined this tick go to a deep repair and come back healthy."""
        for name, node in nodes.items():
            if node.fence and not self.snap.nodes[name].fence:
                self.counts.fenced += 1
                self.at(self.now + FENCED_REPAIR_HOURS * 3600, self.repaired, name)

    def repaired(self, name: str) -> None:
        self.lemons.discard(name)
        self.command("restore-node", name)

    def wake(self) -> None:
        self.waking = False
        self.obs.append(Command("wake", self.job_id, self.now))  # an unknown command: a tick

    def job_state(self) -> str:
        job = self.snap.jobs.get(self.job_id)
        return job.state.value if job is not None else "FAILED (manual restart)"

    # ---- the job -------------------------------------------------------------------------

    def submit(self) -> None:
        self.job_id = f"{self.spec.name}-{next(self.jobs)}"
        job = Job(self.job_id, self.spec, "/sim", self.now, replicas=make_replicas(self.spec))
        self.snap = replace(self.snap, jobs={**self.snap.jobs, self.job_id: job}, index=None)
        self.obs.append(Command("submit", self.job_id, self.now))
        if not self.timeline:
            self.timeline.append((self.now, "QUEUED"))

    def ended(self, job: Job) -> None:
        """FAILED (or ended otherwise) before the horizon: someone must resubmit it."""
        self.counts.manual += 1
        self.manual_seconds += min(self.calib.manual_restart_seconds, self.horizon - self.now)
        self.at(self.now + self.calib.manual_restart_seconds, self.submit)

    def state_changed(self, state: str) -> None:
        self.timeline.append((self.now, state))
        if state == JobState.RUNNING.value:
            self.start_training()

    def start_training(self) -> None:
        job = self.snap.jobs[self.job_id]
        every = self.interval_seconds()
        if self.policy.snapshots and self.policy.interval == "auto":
            self.train.snap_every = self.snapshot_steps()
        t0, source = self.train.start(self.now, every, self.node_lost)
        self.counts.restores[source] = self.counts.restores.get(source, 0) + 1
        interval.note_restore(self.record, REPORTED[source])  # one per group: replicas=1
        self.node_lost = False
        self.watchdog.progress(job, ReplicaProgress(
            job.primary.launch_id or "", self.train.step + 1, t0, steps=50,
            step_seconds=self.calib.step_seconds))
        self.take_records()

    def interval_seconds(self) -> float:
        if self.policy.interval == "auto" or self.spec.checkpoint.every == "auto":
            interval.note_cost(self.record, self.calib.save_blocking_seconds)
            ceiling = self.spec.checkpoint.max_interval_seconds
            return interval.choose(self.record, self.cluster, ceiling).seconds
        if isinstance(self.policy.interval, float):
            return self.policy.interval
        ckpt = self.spec.checkpoint
        if ckpt.every_seconds is not None:
            return ckpt.every_seconds
        if ckpt.every_steps is not None:
            return ckpt.every_steps * self.calib.step_seconds
        return DEFAULT_INTERVAL_SECONDS

    def snapshot_steps(self) -> int:
        """Snapshots by Young/Daly too: their blocking cost against the job's MTBF."""
        r, c = self.record, self.cluster
        mtbf = interval.mtbf(r.failures, r.seconds, c.failures, c.seconds, c.prior)
        cost = self.calib.snapshot_blocking_seconds
        best = interval.young_daly(cost, mtbf, self.spec.checkpoint.max_interval_seconds)
        return max(1, round(best / self.calib.step_seconds))

    def stop_training(self, t: float, keeps_snapshot: bool) -> None:
        trained = self.train.interrupt(t, keeps_snapshot)
        self.record.seconds += trained
        self.cluster.seconds += trained
        self.take_records()

    def take_records(self) -> None:
        """Training's records so far go to the primary's launch (the account reads them)."""
        if self.primary is not None:
            self.primary[1].extend(self.train.records)
        self.train.records = []

    # ---- replicas ------------------------------------------------------------------------

    def launch(self, d: Launch, spare: bool) -> None:
        """Warm on a node whose standbys this job started, or on a spare held long enough
        for its standbys to be up; cold elsewhere."""
        warm = self.policy.warm and (d.node in self.hosted or spare)
        cost = self.calib.launch_warm_seconds if warm else self.calib.launch_cold_seconds
        if self.policy.warm and not warm and self.calib.launch_first_seconds is not None:
            cost = self.calib.launch_first_seconds  # the node's pool starts with this launch
        self.hosted.add(d.node)
        self.procs[d.launch_id] = Proc(d)
        self.at(self.now + cost, self.started, d.launch_id)
        job = self.snap.jobs[self.job_id]
        if d.replica == job.primary.name:
            self.close_primary(self.now)
            self.primary = (self.now, [])

    def close_primary(self, t: float) -> None:
        if self.primary is not None:
            launched, records = self.primary
            self.launches.append(LaunchReport(launched, t, records))
            self.primary = None

    def started(self, lid: str) -> None:
        p = self.procs.get(lid)
        if p is not None and not p.started:
            p.started = True
            self.obs.append(ReplicaStarted(lid, 1, self.now))

    def exited(self, lid: str, code: int, sig: int | None) -> None:
        if self.procs.pop(lid, None) is None:
            return
        self.obs.append(ReplicaExited(lid, code, self.now, signal=sig))

    # ---- failures ------------------------------------------------------------------------

    def fail(self, d: Draw) -> None:
        hit = self.nodes_hit(d)
        if not hit:
            return
        c = d.category
        self.counts.interruptions += 1
        self.counts.lemon_hits += d.lemon
        self.stop_training(self.now, keeps_snapshot=self.snapshot_survives(c.kind, hit))
        self.cluster.failures += 1
        self.record.failures += 1
        detect = self.detection(c.hang, c.detect_seconds)
        if c.kind == "hardware":
            self.counts.node_losses += len(hit)
            self.node_lost = True
            for node in hit:
                self.at(self.now + detect, self.command, "fail-node", node)
                # back as the backend sees it: a quarantine stays (core/commands.py)
                self.at(self.now + c.repair_hours * 3600, self.command, "node-back", node)
            if c.hang and self.policy.hangs == "nccl":
                self.at(self.now + detect, self.abort_all)
        elif c.hang and self.policy.hangs == "nccl":
            self.at(self.now + detect, self.abort_all)
        elif c.hang:
            self.at(self.now + detect, self.hung, hit[0])
        else:
            for lid in self.launches_on(hit):
                self.at(self.now + detect, self.exited, lid, 1, None)

    def snapshot_survives(self, kind: str, hit: list[str]) -> bool:
        """Whether the newest snapshot outlives a failure of the nodes `hit`: after a transient
        fault the replicas restart where their node-local files are; the replicas of lost
        nodes keep it only through peer copies, and only if each one's peer (the runtime's
        rule, `choose_peer`, over the running replicas in rank order) was not lost with it."""
        if kind != "hardware":
            return True
        if not self.policy.peers:
            return False
        lost = set(hit)
        where = {p.launch.replica: p.launch.node for p in self.procs.values()}
        ring = [(r.name, where[r.name]) for r in self.snap.jobs[self.job_id].replicas
                if r.name in where]
        peers = [choose_peer(ring, name) for name, node in ring if node in lost]
        return all(peer is not None and where[peer] not in lost for peer in peers)

    def busy_nodes(self) -> list[str]:
        """Nodes running the job's replicas, in node order."""
        return sorted({p.launch.node for p in self.procs.values()},
                      key=self.node_pos.__getitem__)

    def nodes_hit(self, d: Draw) -> list[str]:
        """The nodes a failure takes, among those running the job's replicas."""
        busy = self.busy_nodes()
        if not busy:
            return []
        if d.category.scope == "job":
            return busy
        node = self.struck(d, busy)
        if node is None:
            return []
        if d.category.scope != "switch":
            return [node]
        i = self.node_pos[node] // self.switch_nodes * self.switch_nodes
        return self.node_order[i:i + self.switch_nodes]

    def struck(self, d: Draw, busy: list[str]) -> str | None:
        """The node a failure strikes: a repeat offender's (None when that one runs nothing
        of the job: quarantined, or idle), else one of the job's other nodes."""
        if d.lemon:
            lemons = sorted(self.lemons)
            node = lemons[d.node_index % len(lemons)] if lemons else None
            return node if node in busy else None
        if self.lemons and d.category.kind in self.lemon_kinds:
            busy = [n for n in busy if n not in self.lemons] or busy
        return busy[d.node_index % len(busy)]

    def detection(self, hang: bool, seconds: float) -> float:
        if not hang:
            return seconds
        if self.policy.hangs == "nccl":
            return self.calib.nccl_timeout_seconds
        job = self.snap.jobs.get(self.job_id)
        return self.watchdog.hang_seconds(job) if job is not None else seconds

    def launches_on(self, nodes: list[str]) -> list[str]:
        return [lid for lid, p in self.procs.items() if p.launch.node in nodes]

    def command(self, kind: str, node: str) -> None:
        self.obs.append(Command(kind, node, self.now))

    def abort_all(self) -> None:
        """NCCL's watchdog ends every rank of a hung collective with SIGABRT."""
        for lid in list(self.procs):
            self.exited(lid, 128 + signal.SIGABRT, signal.SIGABRT)

    def hung(self, node: str) -> None:
        on = self.launches_on([node])
        if on:
            self.obs.append(Hung(on[0], self.now, f"HANG: no progress on {node} (simulated)",
                                 "simulated hang"))
