"""The control plane's step function: `decide(snapshot, observations, now)`.

No side effects: it never mutates the snapshot; it returns the next one, the decisions for the
shell to carry out and the events that explain them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from perdure.core import admission, elastic, health, spares
from perdure.core.commands import COMMANDS
from perdure.core.events import (
    QUEUED_IN_BACKEND,
    Command,
    Decision,
    Hung,
    LaunchFailed,
    LaunchQueued,
    NodeCheckFailed,
    Observation,
    ReplicaExited,
    ReplicaProgress,
    ReplicaStarted,
)
from perdure.core.launchenv import LaunchSettings, job_of_launch, replica_of_launch
from perdure.core.model import Blame, Job, JobError
from perdure.core.policy import (
    EXIT_SUSPENDED,
    Action,
    Failure,
    Verdict,
    classify,
    crash_loop,
    escalate,
    is_peer_error,
    signal_text,
)
from perdure.core.records import Event, Strike
from perdure.core.replica import Replica
from perdure.core.states import ErrorCode, JobState, NodeState, ReplicaState
from perdure.core.text import all_of, plural
from perdure.core.tick import Snapshot, Tick
from perdure.core.watchdog import hang_verdict

INTERNAL_MESSAGE = "Internal error occurred for the current attempt."


@dataclass(frozen=True)
class Outcome:
    snapshot: Snapshot
    decisions: list[Decision]
    events: list[Event]
    changed_jobs: frozenset[str]
    nodes_changed: bool


def decide(
    snap: Snapshot,
    observations: Iterable[Observation],
    now: float,
    settings: LaunchSettings,
) -> Outcome:
    """One tick: apply the observations (earliest first), then place and admit."""
    tick = _Decider(snap, now, settings)
    for obs in sorted(observations, key=lambda o: o.time):
        tick.observe(obs)
    tick.settle()
    admission.schedule(tick)
    return tick.outcome()


def lost_work(job: Job, now: float) -> str:
    """What a preemption cost a script that could not save: the work since its last
    checkpoint (or since it started running), in seconds and steps."""
    since = job.last_checkpoint or job.running_since
    if since is None:
        return "the work since it started is lost"
    seconds = f"{max(0.0, now - since):.1f}s"
    if job.step is None:
        steps = "steps unknown: the script reports none"
    else:
        done = job.step - (job.checkpoint_step or 0)
        steps = f"{plural(max(0, done), 'step')}"
    where = (f"its last checkpoint (step {job.checkpoint_step})"
             if job.last_checkpoint is not None else "it started, with no checkpoint")
    return f"{seconds} of work ({steps}) since {where} is lost"


def _count_repeats(r: Replica, f: Failure) -> None:
    """Count the failures in a row that raised the same exception (across attempts too)."""
    if f.exit_code == 0 or f.error is None:
        r.error_seen, r.error_repeats = "", 0
        return
    summary = f.error.summary()
    r.error_repeats = r.error_repeats + 1 if summary == r.error_seen else 1
    r.error_seen = summary


def _status(f: Failure) -> str:
    where = f" in local rank {f.local_rank}" if f.local_rank is not None else ""
    return f"{f.exit_code}{f' ({signal_text(f.signal)})' if f.signal else ''}{where}"


class _Decider(Tick):
    """A tick that observes, applies the failure policy and schedules. What looks at a whole
    job runs once per job, in `settle`: a tick stays linear however many replicas report."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._by_launch: dict[str, dict[str, Replica]] = {}
        self._unsettled: dict[str, Job] = {}
        self._unstopped_sets: dict[str, tuple[list[int], set[int]]] = {}

    def _replica(self, job: Job, lid: str) -> Replica | None:
        name = replica_of_launch(lid)
        rank = job.rank_of(name)
        if rank is not None and rank < len(job.replicas) and job.replicas[rank].name == name:
            found = job.replicas[rank]  # where make_replicas put it: no index to build
            return found if found.launch_id == lid else None  # else an earlier launch's
        index = self._by_launch.get(job.id)
        if index is None:  # launch ids do not change before `schedule`
            index = {r.launch_id: r for r in job.replicas if r.launch_id}
            self._by_launch[job.id] = index
        return index.get(lid)

    def _unstopped(self, job: Job) -> set[int]:
        seen = self._unstopped_sets.get(job.id)
        if seen is None or seen[0] is not job.unstopped:
            seen = self._unstopped_sets[job.id] = (job.unstopped, set(job.unstopped))
        return seen[1]

    def settle(self) -> None:
        """Once per job whose replicas started or exited: grow an elastic group, mark a job
        whose replicas are all up RUNNING."""
        for job in self._unsettled.values():
            if job.elastic and job.after_stop is None:
                elastic.joined(self, job)
            if job.state is JobState.PENDING and not job.unstopped and (
                    job.count(ReplicaState.RUNNING) == len(job.replicas)):
                job.state = JobState.RUNNING
                job.running_since = self.now
                started = all_of(len(job.replicas), "replica")
                self.event(job, "running", f"RUNNING: {started} started")

    def outcome(self) -> Outcome:
        for i in self.changed:  # cached slot usage may be stale after this tick's changes
            job = self.jobs[i]
            job.__dict__.pop("usage", None)
            job.__dict__.pop("gpu_usage", None)
            job.seal()  # committed: the next tick's clone shares all its replicas
            self.decisions.extend(spares.holds(self.snap.jobs.get(i), job))
        snap = Snapshot(self.jobs, self.nodes, self.snap.quotas, self.index(), self.layouts)
        return Outcome(snap, self.decisions, self.events, frozenset(self.changed),
                       self.nodes_changed)

    # ---- observations ------------------------------------------------------------------

    def observe(self, obs: Observation) -> None:
        if isinstance(obs, Command):
            handler = COMMANDS.get(obs.kind)
            if handler is not None:
                handler(self, obs)
            return
        if isinstance(obs, NodeCheckFailed):
            health.fence(self, obs.node, f"{health.HEALTH_CHECK} failed: {obs.message}")
            return
        job = self.touch(job_of_launch(obs.launch_id))
        r = self._replica(job, obs.launch_id) if job else None
        if job is None or r is None:
            return  # a launch of a job or round that is gone: nothing to decide
        if not isinstance(obs, ReplicaProgress):  # these change the replica: the tick's own
            r = job.own(r)
        if isinstance(obs, ReplicaStarted):
            r.pid = obs.pid
            self.started(job, r)
        elif isinstance(obs, ReplicaExited):
            self.exited(job, r, obs)
        elif isinstance(obs, LaunchFailed):
            self.launch_failed(job, r, obs)
        elif isinstance(obs, LaunchQueued):
            self.queued(job, r, obs)
        elif isinstance(obs, ReplicaProgress):
            if obs.step is not None:
                job.step = obs.step
            for note in obs.notes:
                self.event(job, "runtime", f"{r.name}: {note}")
            if obs.save_seconds is not None:
                job.last_checkpoint, job.checkpoint_step = obs.time, obs.step
            if obs.failed_saves is not None:
                self.save_outcome(job, obs)
        elif isinstance(obs, Hung):
            self.hung(job, r, obs)

    def save_outcome(self, job: Job, obs: ReplicaProgress) -> None:
        """An event for each failed save, an alert at the runtime's threshold, one on recovery."""
        failed, before = obs.failed_saves or 0, job.failed_saves
        if failed > before:
            self.event(job, "checkpoint", f"checkpoint save failed ({failed} in a row): "
                       f"{obs.save_error}; training goes on, the previous checkpoint stays "
                       "the newest complete one")
            if obs.alert_after is not None and failed >= obs.alert_after and not job.save_alert:
                job.save_alert = True
                self.event(job, "checkpoint-alert", f"ALERT: {failed} checkpoint saves in a row "
                           "failed: the job is training without new checkpoints and a failure "
                           f"now loses everything since the last one. Last error: "
                           f"{obs.save_error}")
        elif failed == 0 and before:
            self.event(job, "checkpoint", f"checkpoint saves work again: step {obs.step} "
                       f"committed after {before} failed save(s)")
            job.save_alert = False
        job.failed_saves = failed
        job.save_error = obs.save_error or ""

    def hung(self, job: Job, r: Replica, obs: Hung) -> None:
        """The watchdog's verdict: restart the group by the failure policy, charged to `r`."""
        if job.after_stop is not None or r.state is not ReplicaState.RUNNING:
            return  # the job moved on while the stacks were captured
        self.active = True
        self.event(job, "watchdog", obs.report)
        verdict, reason = escalate(hang_verdict(obs.message), r.restarts, job.retries, job.spec)
        self.apply(job, r, verdict, f"{r.name} hung: {reason}")

    def queued(self, job: Job, r: Replica, obs: LaunchQueued) -> None:
        """A launch waits in the backend's own queue (QUEUED), or left it (PENDING again)."""
        if r.state is not ReplicaState.STARTING or job.after_stop is not None:
            return
        if not obs.reason:
            self.dequeued(job, f"{obs.where} started {obs.detail or 'its allocation'}")
            return
        reason = f"{obs.where}: {obs.reason}" + (f" ({obs.detail})" if obs.detail else "")
        if job.in_backend_queue and job.backend_queue == reason:
            return
        if not job.in_backend_queue and (job.state is not JobState.PENDING or any(
                x.state is ReplicaState.RUNNING for x in job.replicas)):
            # Others run (a replacement's own wait): the job is not queued, the replica is.
            self.event(job, "waiting", f"{r.name} waits in the backend's queue: {reason}")
            return
        job.state, job.backend_queue = JobState.QUEUED, reason
        self.event(job, "state", f"{QUEUED_IN_BACKEND} {reason}")

    def dequeued(self, job: Job, why: str) -> None:
        if job.in_backend_queue:
            job.state, job.backend_queue = JobState.PENDING, ""
            self.event(job, "state", f"PENDING: {why}; replicas starting")

    def started(self, job: Job, r: Replica) -> None:
        if r.state is ReplicaState.STARTING:
            r.state = ReplicaState.RUNNING
        self.dequeued(job, "a replica started")
        self._unsettled[job.id] = job

    def exited(self, job: Job, r: Replica, obs: ReplicaExited) -> None:
        if not r.alive:
            return  # reported twice
        self.active = True
        if r.state is not ReplicaState.STOPPING and job.unstopped and (
                r.rank in self._unstopped(job)):  # its stop was still to be sent
            r.state, r.relaunch = ReplicaState.STOPPING, True
        was_stopping = r.state is ReplicaState.STOPPING
        r.state, r.exit_code = ReplicaState.EXITED, obs.exit_code
        node = self.nodes.get(r.node or "")
        f = Failure(
            replica=r.name, primary=r is job.primary, exit_code=obs.exit_code,
            signal=obs.signal, oom=obs.oom, error=obs.error, notice=r.notice,
            node_lost=r.node if node is not None and node.state is NodeState.DOWN else None,
            local_rank=obs.local_rank, stderr_tail=obs.stderr_tail,
        )
        r.notice = None
        _count_repeats(r, f)
        if f.primary and f.exit_code == 0 and f.notice is not None:
            # It finished as the notice came: the job succeeded, there is nothing to resume.
            self.apply(job, r, classify(f, job.spec), f"{r.name} exited 0: primary exited 0 "
                                                      f"(under a {f.notice} notice)")
            return
        if was_stopping or job.after_stop is not None:
            if self.caused_the_round(job, f, obs.time):
                self.blame_node(job, r, f, obs.time)
                self.recharge(job, r, f)
                return
            self.stopped(job, r, f)
            return
        self.blame_node(job, r, f, obs.time)
        verdict = classify(f, job.spec)
        if verdict.reason == "node lost":  # the node's fault, not the replica's: nothing spent
            reason = ("node lost, a membership change (no restart counted)" if job.elastic
                      else "node lost, restarted elsewhere (no restart counted)")
        else:
            verdict, reason = escalate(verdict, r.restarts, job.retries, job.spec)
            verdict = crash_loop(verdict, f, r.error_repeats)
        self.apply(job, r, verdict, f"{r.name} exited {_status(f)}: {reason}")
        self._unsettled[job.id] = job  # it may have been the last of a group still starting

    def blame_node(self, job: Job, r: Replica, f: Failure, when: float) -> None:
        """A failure that points at the machine is a strike against the replica's node."""
        kind = health.machine_fault(f)
        if kind is not None and r.node is not None:
            health.strike(self, r.node, Strike(when, kind, job.id, r.name))

    def caused_the_round(self, job: Job, f: Failure, exit_time: float) -> bool:
        """Whether `f`, seen while this round stops, failed before the blamed lost-peer exit
        (which can be seen a tick before the dead replica's own)."""
        blame = job.blame
        return (blame is not None and f.replica != blame.replica and exit_time < blame.since
                and job.after_stop is None and f.exit_code != 0 and f.notice is None
                and not is_peer_error(f.error))

    def recharge(self, job: Job, r: Replica, f: Failure) -> None:
        """Charge this round to `r`, whose failure came first, and decide on it."""

        blamed = self.unblame(job)
        verdict, reason = escalate(classify(f, job.spec), r.restarts, job.retries, job.spec)
        self.event(job, "decision", f"{r.name} exited {_status(f)} before {blamed.name}'s "
                                    f"lost-peer exit: {blamed.name}'s restart is not counted")
        if verdict.action is Action.RESTART:
            if verdict.reason != "node lost":
                r.restarts += 1
            if verdict.code is not None and verdict.message:
                job.error = JobError(verdict.code, verdict.message)
            self.event(job, "decision", f"restart {r.name} exited {_status(f)}: {reason} "
                                        f"(the group restart already under way)")
            self.stopped(job, r, f)
            return
        r.relaunch = False
        self.apply(job, r, verdict, f"{r.name} exited {_status(f)}: {reason}")

    def stopped(self, job: Job, r: Replica, f: Failure) -> None:
        """An exit the controller asked for (or one during a notice): no failure."""
        if f.exit_code == 0 and not f.notice:
            self.event(job, "exit", f"{r.name} finished")
        else:
            why = classify(f, job.spec).reason if f.notice else "stopped"
            if job.after_stop is JobState.SUCCEEDED and not f.notice:
                why = "stopped at the end of its grace after the primary succeeded"
            if (f.notice == "preemption" and f.exit_code not in (0, EXIT_SUSPENDED)
                    and r is job.primary):
                why += f"; it did not save: {lost_work(job, self.now)}"
            self.event(job, "exit", f"{r.name} exited {_status(f)} ({why})")
        if r.relaunch and job.after_stop is None:
            if job.elastic:
                elastic.lose(self, job, r, f"{r.name} moved")
            r.state = ReplicaState.WAITING
        r.relaunch = False
        self.maybe_finish(job)

    def launch_failed(self, job: Job, r: Replica, obs: LaunchFailed) -> None:
        if not r.alive:
            return
        self.active = True
        r.state = ReplicaState.EXITED
        self.event(job, "launch-failed", f"{r.name}: {obs.message}")
        if job.after_stop is not None or r.relaunch:
            r.relaunch = False
            self.maybe_finish(job)
            return
        if obs.user_error:  # the spec's error: no retry can fix it
            message = f"Replica {r.name} could not start: {obs.message}"
            self.apply(job, r, Verdict(Action.FAIL, ErrorCode.USER_CODE, message,
                                       "launch failed"), f"{r.name}: the spec cannot start")
            return
        v = Verdict(Action.RETRY, ErrorCode.INTERNAL, INTERNAL_MESSAGE, "launch failed")
        verdict, reason = escalate(v, r.restarts, job.retries, job.spec)
        self.apply(job, r, verdict, f"{r.name}: {reason}")

    # ---- verdicts ------------------------------------------------------------------------

    def apply(self, job: Job, r: Replica, v: Verdict, reason: str) -> None:
        """Carry out the failure policy's verdict on `r` (a handler per action: _ACTIONS)."""
        _ACTIONS[v.action](self, job, r, v, reason)

    def succeed(self, job: Job, r: Replica, v: Verdict, reason: str) -> None:
        job.error = None
        self.event(job, "decision", f"succeed: {reason}")
        self.end(job, JobState.SUCCEEDED)

    def done(self, job: Job, r: Replica, v: Verdict, reason: str) -> None:
        self.event(job, "decision", f"done: {reason}")

    def suspend(self, job: Job, r: Replica, v: Verdict, reason: str) -> None:
        self.event(job, "decision", f"suspend job: {reason}")
        job.state = JobState.SUSPENDING
        self.event(job, "state", "SUSPENDING: a replica saved and asked to be resumed")
        self.end(job, JobState.SUSPENDED, notice="preemption")

    def restart_replica(self, job: Job, r: Replica, v: Verdict, reason: str) -> None:
        """RESTART (a restart counted, unless its node was lost) or MOVE (none)."""
        if v.action is Action.RESTART and v.reason != "node lost":
            r.restarts += 1
        collateral = v.reason == "peer lost" and not job.elastic
        job.blame = Blame(r.name, self.now) if collateral else None
        if v.code is not None and v.message:
            job.error = JobError(v.code, v.message)
        self.event(job, "decision", f"restart {reason}")
        if job.elastic:
            elastic.lose(self, job, r, reason)
        else:
            self.restart(job, [r], notice=None, why="restart")

    def retry(self, job: Job, r: Replica, v: Verdict, reason: str) -> None:
        assert v.code is not None
        job.retries[v.code.value] = job.retries.get(v.code.value, 0) + 1
        job.error = JobError(v.code, v.message)
        self.event(job, "decision", f"retry job: {reason}")
        self.end(job, JobState.QUEUED)

    def fail(self, job: Job, r: Replica, v: Verdict, reason: str) -> None:
        assert v.code is not None
        job.error = JobError(v.code, v.message)
        self.event(job, "decision", f"fail job: {reason}")
        self.end(job, JobState.FAILED)


_ACTIONS: dict[Action, Callable[[_Decider, Job, Replica, Verdict, str], None]] = {
    Action.SUCCEED: _Decider.succeed,
    Action.DONE: _Decider.done,
    Action.SUSPEND: _Decider.suspend,
    Action.RESTART: _Decider.restart_replica,
    Action.MOVE: _Decider.restart_replica,
    Action.RETRY: _Decider.retry,
    Action.FAIL: _Decider.fail,
}
