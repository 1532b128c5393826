"""The controller: load -> observe -> decide -> commit -> apply, one tick at a time.

The store is written once per tick; decisions are carried out and events published after the
commit. A controller killed at any moment reconciles with what the backend runs at `start()`.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import shutil
import signal
import time
from collections.abc import Callable, Generator
from pathlib import Path

from perdure.backends.base import Backend, LaunchError, NodeInfo
from perdure.controller import backoff, vet
from perdure.controller.intervals import IntervalShell
from perdure.controller.lock import lock_for_controller
from perdure.controller.publish import publish_round
from perdure.controller.resumes import ResumeShell
from perdure.controller.watch import WatchShell
from perdure.core.clusterspec import ClusterSpec
from perdure.core.decide import Outcome, decide
from perdure.core.events import (
    Command,
    Decision,
    HoldNodes,
    KillNode,
    Launch,
    LaunchFailed,
    Observation,
    Rendezvous,
    ReplicaExited,
    Stop,
)
from perdure.core.launchenv import LaunchSettings, job_of_launch, node_dir
from perdure.core.model import Job
from perdure.core.records import Event, Node
from perdure.core.states import ReplicaState
from perdure.core.text import plural
from perdure.core.tick import Snapshot
from perdure.store.schema import StoredEvent, UnreadableJob
from perdure.store.sqlite import Store

COMMANDS_PER_TICK = 8
OBSERVATIONS_PER_TICK = 256  # the rest waits, in order, for the next ticks
LOAD_ROWS_PER_TICK = 4096  # replica rows of a submitted job read a tick
FULL_COLLECTION_EVERY = 100  # ticks


class ControllerBusy(RuntimeError):
    """Another controller already drives this state dir."""


class Controller:
    """Drives every unfinished job of a state dir through a backend."""

    def __init__(
        self,
        state_dir: Path,
        store: Store,
        backend: Backend,
        cluster: ClusterSpec,
        settings: LaunchSettings,
        *,
        clock: Callable[[], float] = time.time,
        interval: float = 0.02,
    ) -> None:
        self.state_dir, self.store, self.backend = state_dir, store, backend
        self.cluster, self.settings, self.clock, self.interval = cluster, settings, clock, interval
        self.listeners: list[Callable[[StoredEvent], None]] = []
        # told each polled exit's seconds from the exit to its observation (serve's /metrics)
        self.on_exit: Callable[[float], None] | None = None
        self.snapshot = Snapshot({}, {}, {q.name: q.quota for q in cluster.queues})
        self.pending: list[Observation] = []
        self._start_events: list[Event] = []  # written by the first tick
        self.last_command = 0
        self._lock_fd: int | None = None
        self.tick_seconds: list[float] = []
        self.tick_cpu_seconds: list[float] = []  # this thread's CPU: wall less waiting for it
        self._deferred: list[Decision] = []  # what the OS refused: tried again next tick
        self._refused: set[Decision] = set()  # reported once, not every tick it is retried
        self.held = backoff.Backoff()  # launches the machine refused, tried again later
        self.watch = WatchShell(state_dir, backend, clock)
        self.intervals = IntervalShell(settings.state_dir)
        self.resumes = ResumeShell()
        self._poll_failing = False
        self._fenced: dict[str, str] | None = None  # quarantines the backend was told of
        self._loading: tuple[str, Generator[None, None, Job | None]] | None = None
        self._ticks = 0

    # ---- start and reconcile ----------------------------------------------------------

    def start(self) -> None:
        """Load unfinished jobs, merge node states, and re-attach to running replicas."""
        self._lock_fd = lock_for_controller(self.state_dir)
        if self._lock_fd is None:
            raise ControllerBusy(f"another controller is running on {self.state_dir}")
        self.store.checkpoint_in_background()
        stored = self.store.nodes()
        nodes = {n.name: _merged(n, stored.get(n.name)) for n in self.backend.nodes()}
        self.store.save_nodes(nodes.values())
        readable, unreadable = self.store.unfinished()
        jobs = {j.id: j for j in readable}
        for err in unreadable:
            self._fail_unreadable(err)
        self.snapshot = Snapshot(jobs, nodes, self.snapshot.quotas)
        self._tell_fenced()
        self.last_command = self.store.last_command_id()
        alive = [r for j in jobs.values() for r in j.replicas if r.alive and r.launch_id]
        self.pending.extend(self._adopt([r.launch_id for r in alive if r.launch_id]))
        now = self.clock()
        for job in jobs.values():
            if job.spares:  # the spares its attempt holds, told again
                self._apply(HoldNodes(job.id, job.attempt, tuple(sorted(job.spares))))
            running = sum(1 for r in job.replicas if r.alive and r.launch_id)
            if running:  # in the job's history: the replicas outlived a controller
                self._start_events.append(Event(
                    now, job.id, "controller", f"controller started (pid {os.getpid()}): "
                    f"re-attached to {plural(running, 'replica')} launched before it"))
            for r in job.replicas:  # a stop decided before a crash may never have been sent
                if r.state is ReplicaState.STOPPING and r.launch_id:
                    self._apply(Stop(r.launch_id, signal.SIGTERM,
                                     job.spec.restart.stop_grace_seconds,
                                     "re-sent after controller restart"))

    def _fail_unreadable(self, err: UnreadableJob) -> None:
        running = self.store.fail_unreadable(err, self.clock())
        if running:  # stop what may still run of it: its record is gone
            self.pending.extend(self._adopt(running))
            for lid in running:
                self._apply(Stop(lid, signal.SIGTERM, 5.0, "its job cannot be read back"))

    def _adopt(self, launch_ids: list[str]) -> list[Observation]:
        """Re-attach to running launches; a backend that fails to fails those launches."""
        try:
            return self._vetted(self.backend.adopt(launch_ids))
        except Exception as exc:
            why = f"the backend could not re-attach to it: {vet.error_words(exc)}"
            return [LaunchFailed(lid, why, self.clock()) for lid in launch_ids]

    def close(self) -> None:
        self.watch.close()
        self.backend.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---- the tick ------------------------------------------------------------------------

    def _commands(self) -> list[Observation]:
        out: list[Observation] = []
        new_jobs: dict[str, Job] = {}
        big = self.settings.launches_per_tick
        for cid, cmd in self.store.commands_after(self.last_command, COMMANDS_PER_TICK):
            if cmd.kind == "submit" and cmd.target not in self.snapshot.jobs:
                try:
                    done, job = self._load(cmd.target)
                except UnreadableJob as err:
                    self.last_command = cid
                    self._fail_unreadable(err)
                    continue
                if not done:
                    break  # read over the next ticks: its command is taken once it is in
                if job is None or job.state.terminal:
                    self.last_command = cid
                    continue
                new_jobs[job.id] = job
                if big is not None and len(job.replicas) > big:
                    break  # loading it was this tick's work: its command is taken next tick
            self.last_command = cid
            out.append(cmd)
        if new_jobs:
            # new jobs reach the index through their submit command (it touches them)
            self.snapshot = dataclasses.replace(self.snapshot,
                                                jobs={**self.snapshot.jobs, **new_jobs})
        return out

    def _load(self, job_id: str) -> tuple[bool, Job | None]:
        """Read the next part of a submitted job: whether it is read, and then the job."""
        if self.settings.launches_per_tick is None:
            return True, self.store.job(job_id)
        if self._loading is None or self._loading[0] != job_id:
            self._loading = (job_id, self.store.job_in_parts(job_id, LOAD_ROWS_PER_TICK))
        try:
            next(self._loading[1])
        except StopIteration as read:
            self._loading = None
            return True, read.value  # type: ignore[no-any-return]
        except UnreadableJob:
            self._loading = None
            raise
        return False, None

    def tick(self) -> Outcome:
        """One pass: observe, decide, commit, act, publish; its garbage collected after it."""
        gc.disable()
        try:
            outcome = self._tick()
        finally:
            gc.enable()
        self._ticks += 1
        gc.collect(2 if self._ticks % FULL_COLLECTION_EVERY == 0 else 1)
        return outcome

    def _tick(self) -> Outcome:
        began, cpu = time.perf_counter(), time.thread_time()
        news = self.pending + self._poll()
        self.pending = news[OBSERVATIONS_PER_TICK:]
        observations = news[:OBSERVATIONS_PER_TICK] + self._commands()
        now = self.clock()
        found, noted = self.watch.step(self.snapshot.jobs, self.snapshot.nodes, observations, now)
        observations += found
        self._start_events += noted
        self._start_events += self.intervals.step(self.snapshot.jobs, observations, now)
        outcome = self._decide(observations, now)
        changed = [outcome.snapshot.jobs[i] for i in outcome.changed_jobs]
        events, self._start_events = [*self._start_events, *outcome.events], []
        stored = self.store.commit_tick(
            changed, events,
            outcome.snapshot.nodes.values() if outcome.nodes_changed else None,
            self.last_command,
        )
        jobs = dict(outcome.snapshot.jobs)
        for i in outcome.changed_jobs:
            if jobs[i].state.terminal:
                del jobs[i]
                self._forget_node_dir(i)
        self.snapshot = dataclasses.replace(outcome.snapshot, jobs=jobs)
        self.intervals.publish()
        if outcome.nodes_changed:
            self._tell_fenced()
        deferred, self._deferred = self._deferred, []
        for d in [*deferred, *outcome.decisions]:
            self._apply(d)
        for launch in self.held.due(self.clock()):
            self._launch(launch)
        for e in stored:
            for listener in self.listeners:
                listener(e)
        self.tick_seconds.append(time.perf_counter() - began)
        self.tick_cpu_seconds.append(time.thread_time() - cpu)
        return outcome

    def _tell_fenced(self) -> None:
        fenced = {n.name: n.fence for n in self.snapshot.nodes.values() if n.fence}
        if fenced == self._fenced:
            return
        self._fenced = fenced
        try:
            self.backend.fence_nodes(fenced)
        except Exception as exc:  # a Slurm command failing: said, tried at the next change
            self._start_events.append(Event(self.clock(), None, "internal",
                                            f"could not tell the backend of quarantined "
                                            f"nodes: {vet.error_words(exc)}"))

    def _forget_node_dir(self, job_id: str) -> None:
        local = node_dir(job_id, self.settings)
        if local is not None:
            shutil.rmtree(local, ignore_errors=True)

    def _poll(self) -> list[Observation]:
        """The backend's news, vetted; a poll that fails is tried again next tick."""
        try:
            observations = self.backend.poll()
        except Exception as exc:  # no backend failure may end the controller
            if not self._poll_failing:
                self._start_events.append(Event(self.clock(), None, "internal",
                                                f"could not poll the backend: "
                                                f"{vet.error_words(exc)}; trying again each tick"))
            self._poll_failing = True
            return []
        self._poll_failing = False
        vetted = self._vetted(observations)
        if self.on_exit is not None:
            now = self.clock()
            for o in vetted:
                if isinstance(o, ReplicaExited):
                    self.on_exit(max(0.0, now - o.time))
        return vetted

    def _vetted(self, replies: object) -> list[Observation]:
        """The replies the protocol allows; each other one fails its launch (stopped) or,
        naming none, is reported and dropped."""
        if not isinstance(replies, list | tuple):
            replies = [replies]
        out: list[Observation] = []
        for reply in replies:
            try:
                out.append(vet.vet(reply))
                continue
            except vet.Unexpected as exc:
                why = str(exc)
            instead = vet.failed(reply, why, self.clock())
            if instead is None:
                self._start_events.append(Event(
                    self.clock(), None, "internal",
                    f"the backend sent an unexpected reply ({why}): {vet.describe(reply)}"))
                continue
            out.append(instead)
            self._deferred.append(Stop(instead.launch_id, signal.SIGKILL, 0.0,
                                       "unexpected backend reply"))
        return out

    def _decide(self, observations: list[Observation], now: float) -> Outcome:
        """`decide`; each backend reply the core fails on is replaced by its launch's failure."""
        try:
            return decide(self.snapshot, observations, now, self.settings)
        except Exception as exc:
            launches: list[Observation] = [o for o in observations
                                           if not isinstance(o, Command)]
            if not launches:
                raise
            first = exc
        bad: list[Observation] = []
        for obs in launches:  # the core is pure: trying an observation alone changes nothing
            try:
                decide(self.snapshot, [obs], now, self.settings)
            except Exception:
                bad.append(obs)
        if not bad:
            raise first
        kept = [o for o in observations if o not in bad]
        for obs in bad:
            instead = vet.failed(obs, f"the controller failed on it: {vet.error_words(first)}", now)
            if instead is not None and instead not in bad:
                kept.append(instead)
                self._deferred.append(Stop(instead.launch_id, signal.SIGKILL, 0.0,
                                           "unexpected backend reply"))
        return decide(self.snapshot, kept, now, self.settings)

    def _apply(self, d: Decision) -> None:
        """Carry out a decision; one the OS refuses is tried again next tick."""
        if isinstance(d, Launch):
            d, said = self.resumes.apply(d, self.clock())
            self._start_events += said  # written by the next tick
            self._launch(d)
            return
        try:
            self._act(d)
        except Exception as exc:  # the OS refused (EMFILE), or a backend's bug
            self._deferred.append(d)
            if d not in self._refused:
                self._refused.add(d)
                job_id = job_of_launch(d.launch_id) if isinstance(d, Stop) else getattr(
                    d, "job_id", None)
                self._start_events.append(Event(
                    self.clock(), job_id, "internal",
                    f"could not carry out {type(d).__name__}: {vet.error_words(exc)}; trying again "
                    "each tick"))
        else:
            if self._refused:  # hashing a big round is not free: only if needed
                self._refused.discard(d)

    def _launch(self, d: Launch) -> None:
        """Start a replica; the machine refusing it holds it (`backoff`), any other failure
        fails the launch next tick."""
        try:
            self.backend.launch(d)
        except Exception as exc:  # LaunchError, OSError, or a backend's bug
            if backoff.machine_errno(exc) is not None:
                note = self.held.hold(d, str(exc), self.clock())
                if note is not None:  # said once per launch, not at every refusal
                    self._start_events.append(Event(self.clock(), d.job_id, "internal", note))
                return
            self.held.drop(d.launch_id)
            user = isinstance(exc, LaunchError) and exc.user_error
            message = (str(exc) if isinstance(exc, LaunchError)
                       else f"the backend could not launch it: {vet.error_words(exc)}")
            self.pending.append(LaunchFailed(d.launch_id, message, self.clock(),
                                             user_error=user))
        else:
            self.held.drop(d.launch_id)

    def _act(self, d: Decision) -> None:
        if isinstance(d, Stop) and self.held.drop(d.launch_id):  # it never started
            self.pending.append(LaunchFailed(
                d.launch_id, f"stopped ({d.reason}) before the machine let it start",
                self.clock()))
        elif isinstance(d, Stop):
            self.backend.stop(d)
        elif isinstance(d, KillNode):
            self.backend.kill_node(d.node)
        elif isinstance(d, Rendezvous):
            publish_round(Path(self.settings.state_dir), d)
        elif isinstance(d, HoldNodes):
            self.backend.hold_nodes(d)

    def run(self, until: Callable[[], bool] | None = None, exit_when_idle: bool = False) -> None:
        while True:
            self.tick()
            if until is not None and until():
                return
            if exit_when_idle and not self.snapshot.jobs and not self.pending:
                return
            if len(self.pending) < OBSERVATIONS_PER_TICK:  # else: no news waits for a nap
                time.sleep(self.interval)


def _merged(found: NodeInfo, stored: Node | None) -> Node:
    """A node the backend has, with its stored state, quarantine and strikes."""
    if stored is None:
        return Node(found.name, found.slots, gpus=found.gpus or 0, gpu_ids=found.gpu_ids)
    return Node(found.name, found.slots, stored.state, found.gpus or 0, found.gpu_ids,
                stored.fence, stored.strikes)
