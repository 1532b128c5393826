"""Run replicas on a Ray cluster: a detached, named launch actor (`actors`) per launch.

One outstanding call per launch (its start, then its exit), collected with
`ray.wait(timeout=0)`, so `poll` never blocks. A Ray node that is gone fails its perdure node
(`fail-node`: no restart charged); it is back when a new Ray node advertises it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import (
    GetTimeoutError,
    OutOfMemoryError,
    RayActorError,
    RayError,
)

from perdure import statedir
from perdure.backends.base import Backend, LaunchError, NodeInfo, exit_observation, sent_error
from perdure.backends.launchdir import launch_record
from perdure.backends.local.progress import ProgressReader
from perdure.backends.lostnodes import LostNodes, killed
from perdure.backends.masterport import MasterPorts
from perdure.backends.node import logcap, warm
from perdure.backends.node.mirror import Mirror
from perdure.backends.node.transport import LaunchTransport
from perdure.backends.ray import cluster as rc
from perdure.backends.ray import nslock, replies
from perdure.backends.ray.nodeactor import RESOURCE_PREFIX, node_actor
from perdure.backends.ray.spare_actors import PortsAhead, SpareActors, size_setting
from perdure.backends.ray.tracked import Tracked, final_pull, pull_all, pull_from_agent
from perdure.backends.spareholds import SpareHolds
from perdure.core.clusterspec import ClusterSpec, RaySpec
from perdure.core.events import (
    HoldNodes,
    Launch,
    LaunchFailed,
    NodeCheckFailed,
    Observation,
    ReplicaStarted,
    Stop,
)

WAIT_SECONDS = 30.0  # how long one outstanding start/exit call waits on the node
NODES_SECONDS = 0.5  # how often the GCS is asked which nodes are alive
PROBE_SECONDS = 3.0  # an agent that does not answer within this is on a lost node
OOM_WORDS = ("OutOfMemory", "out of memory", "memory monitor")


class RayBackend(Backend):
    def __init__(self, state_dir: Path | str, cluster: ClusterSpec) -> None:
        self.spec: RaySpec = cluster.ray or RaySpec()
        self.ns = self.spec.namespace
        self.state_dir = os.path.realpath(state_dir)
        os.makedirs(os.path.join(self.state_dir, statedir.LAUNCHES), exist_ok=True)
        self._configured = [NodeInfo(n.name, n.slots, gpus=n.gpus) for n in cluster.nodes]
        self._lock: Any = None
        self._transport: LaunchTransport | None = None
        self._live: dict[str, rc.RayNode] = {}
        self._lost = LostNodes()
        self._next_nodes = 0.0
        self._active: dict[str, Tracked] = {}
        self._masters = MasterPorts()
        self._progress = ProgressReader()  # the launches' progress, from their mirrored copies
        self._agents: dict[str, Any] = {}
        self._warm = (warm.pool_size(None), warm.idle_seconds(None))
        self._log_max_bytes = logcap.max_bytes()
        self._pending: list[Observation] = []  # nodes of the cluster file that are not up
        self._spares = SpareActors(self.ns, size_setting(), self._warm)
        self._ports_ahead = PortsAhead()
        self._holds = SpareHolds()  # the spare nodes each job's attempt holds
        health = cluster.health  # its preflight runs on each node by the launch's actor
        self._preflight = ({"argv": list(health.preflight), "timeout": health.timeout_seconds}
                           if health.preflight else None)

    def _attach(self) -> None:
        """Connect, take the namespace, start the relay: on first use (a `perdure run` that
        only follows a job never gets here)."""
        if self._transport is not None:
            return
        rc.connect(self.spec)
        self._lock, token = nslock.take_lock(self.spec, f"state dir {self.state_dir}")
        self._spares.attach(token)
        # Replicas on every host reach the relay at the address this machine reaches Ray at.
        self._transport = LaunchTransport(self.state_dir, "net", host=rc.own_address())
        self._transport.ensure()
        self._live = rc.perdure_nodes()
        for node in self._configured:
            if node.name not in self._live:
                self._lose_node(node.name, self._pending)
        for name in self._live:
            self._agent(name)  # start them now: the first launch on a node does not wait
        self._spares.fill(self._live)

    def nodes(self) -> list[NodeInfo]:
        self._attach()
        return rc.node_infos(self._configured, self._live)

    def _agent(self, node: str) -> Any:
        if node not in self._agents:
            self._agents[node] = node_actor(node, self.ns, *self._warm)
        return self._agents[node]

    # ---- launch -----------------------------------------------------------------------------

    def launch(self, launch: Launch) -> None:
        self._attach()
        assert self._transport is not None
        if launch.node not in self._live:
            raise LaunchError(f"cannot launch {launch.replica} on node {launch.node!r}: no "
                              f"live Ray node advertises {RESOURCE_PREFIX}{launch.node}")
        if launch.launch_id in self._active:
            raise LaunchError(f"cannot launch {launch.launch_id!r}: it is already running")
        self._agent(launch.node)  # a node back as a new Ray node gets its agent (and pool)
        env = self._transport.env(launch)  # the relay: rounds, reports, errors, notices
        master = self._live.get(env.get("PERDURE_MASTER_NODE", ""))
        if master is not None:
            env["MASTER_ADDR"] = master.address
            env["MASTER_PORT"] = self._masters.port(launch.job_id, launch.master_key,
                                                    lambda: self._free_port(master.name))
        record = {**launch_record(launch, env, self._log_max_bytes), "warm": list(self._warm)}
        if self._preflight is not None:
            record["preflight"] = self._preflight
        mirror = Mirror(self.state_dir, launch.launch_id, launch.log_prefix)
        if mirror.read_record(statedir.LAUNCH) is not None:
            raise LaunchError(f"launch id {launch.launch_id!r} was already used; every "
                              "launch needs a new id")
        spare = None if launch.gpus else self._spares.take(launch.node)
        mirror.write_record(statedir.LAUNCH, {**record, "log_prefix": launch.log_prefix,
                                            "created": time.time(),
                                            "actor": spare[0] if spare else None})
        try:
            if spare is not None:
                actor = spare[1]
                actor.begin.remote(record)
            else:
                actor = rc.launch_actor(launch.node, launch.launch_id, self.ns, record)
        except (ValueError, RayError) as err:
            raise LaunchError(f"cannot start the actor of {launch.launch_id}: {err}") from None
        tracked = Tracked(launch.launch_id, launch.node, actor, mirror)
        self._ask(tracked, replies.STARTED)
        self._active[launch.launch_id] = tracked

    def _free_port(self, node: str) -> str | None:
        """A port free on `node` (None: the node is gone)."""
        port = self._ports_ahead.take(node)  # asked at the last restart: no wait
        try:
            port = port or str(ray.get(self._agent(node).free_port.remote(),
                                       timeout=PROBE_SECONDS * 10))
        except RayError as err:
            if self._agent_answers(node):
                raise LaunchError(f"node {node} did not give a port: {err}") from None
            # Rank 0's node is gone before the GCS says so: lose it now; the loss restarts
            # the group, so this launch's port (nobody listens on it) does not matter.
            self._lose_node(node, self._pending)
            return None
        self._ports_ahead.ask(node, self._agent(node))  # for the next restart
        return port

    def hold_nodes(self, hold: HoldNodes) -> None:
        self._holds.update(hold)
        self._spares.hold(self._holds.nodes())

    def fence_nodes(self, fenced: dict[str, str]) -> None:
        self._spares.fence(frozenset(fenced))

    # ---- stop -------------------------------------------------------------------------------

    def stop(self, stop: Stop) -> None:
        tracked = self._active.get(stop.launch_id)
        if tracked is not None:
            grace, delay = max(0.0, stop.grace), max(0.0, stop.delay)
            # The relay answers the replica's "is this a notice?" from this record.
            tracked.mirror.write_record(statedir.STOP, statedir.stop_record(
                stop.signal, grace, stop.reason, stop.notice, delay))
            tracked.actor.stop.remote(stop.signal, grace, stop.reason, stop.notice, delay)

    def kill_node(self, node: str) -> None:
        for tracked in self._active.values():
            if tracked.node == node:
                tracked.actor.stop.remote(int(signal.SIGKILL), 0.0, f"node {node} killed", None)

    # ---- observe ----------------------------------------------------------------------------

    def poll(self) -> list[Observation]:
        self._attach()
        out, self._pending = self._pending, []
        now = time.monotonic()
        if now >= self._next_nodes:
            self._next_nodes = now + NODES_SECONDS
            self._check_nodes(out)
            self._spares.fill(self._live)
            self._spares.prewarm(self._live, self._agent, self._preflight)
            out.extend(NodeCheckFailed(node, why, time.time())
                       for node, why in self._spares.failed_checks())
        waiting = {t.waiting: t for t in self._active.values() if t.waiting is not None}
        if waiting:
            ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=0)
            for ref in ready:
                tracked = waiting[ref]
                try:
                    self._answered(tracked, ref, out)
                except Exception as err:  # an answer no launch can give: that launch fails
                    self._unexpected(tracked, err, out)
        pull_all(self._active.values(), now)
        for tracked in list(self._active.values()):  # steps and saves from the copies
            if tracked.started and (p := self._progress.read(tracked.launch_id,
                                                             tracked.mirror.dir, now)):
                out.append(p)
        return out

    def _ask(self, tracked: Tracked, question: str) -> None:
        tracked.asked = question
        call = (tracked.actor.started if question == replies.STARTED
                else tracked.actor.exit_record)
        tracked.waiting = call.remote(WAIT_SECONDS)

    def _answered(self, tracked: Tracked, ref: Any, out: list[Observation]) -> None:
        tracked.waiting = None
        try:
            value = ray.get(ref, timeout=0)
        except (RayActorError, OutOfMemoryError) as err:  # Ray's memory monitor: the latter
            self._actor_died(tracked, err, out)
            return
        except RayError as err:
            self._report_failed(tracked, f"launch {tracked.launch_id}: {err}", out)
            return
        news = replies.read(tracked.asked, tracked.started, value)
        if news.check_failed is not None and not tracked.check_failed:
            tracked.check_failed = True  # the core quarantines the node
            out.append(NodeCheckFailed(tracked.node, news.check_failed, time.time()))
        if news.started is not None:
            pid, started_at, status = news.started
            tracked.started = True
            tracked.mirror.write_record(statedir.STATUS, status)
            out.append(ReplicaStarted(tracked.launch_id, pid, started_at))
        if news.exited is not None:
            self._report_exit(tracked, news.exited, out)
        elif news.ask is not None:
            self._ask(tracked, news.ask)

    def _unexpected(self, tracked: Tracked, err: Exception, out: list[Observation]) -> None:
        self._report_failed(tracked, f"launch {tracked.launch_id}: unexpected answer from its "
                                     f"actor ({type(err).__name__}: {str(err)[:400]})", out)
        with contextlib.suppress(Exception):
            tracked.actor.stop.remote(int(signal.SIGKILL), 0.0, "unexpected answer", None)

    def _report_exit(self, tracked: Tracked, record: dict[str, Any],
                     out: list[Observation]) -> None:
        final_pull(tracked)
        if tracked.started and (p := self._progress.read(tracked.launch_id, tracked.mirror.dir,
                                                          time.monotonic(), final=True)):
            out.append(p)  # what it reported last comes before its exit
        self._progress.forget(tracked.launch_id)
        tracked.mirror.write_record(statedir.EXIT, record)
        self._active.pop(tracked.launch_id, None)
        tracked.actor.release.remote()
        out.append(exit_observation(tracked.launch_id, record,
                                    sent_error(tracked.mirror.dir, record)))

    def _actor_died(self, tracked: Tracked, err: RayError, out: list[Observation]) -> None:
        """The launch's actor is gone (its node died, Ray's memory monitor, a kill), and its
        replica with it."""
        text = str(err)
        oom = any(w in text for w in OOM_WORDS)
        if not oom and not tracked.lost and not self._agent_answers(tracked.node):
            self._lose_node(tracked.node, out)
        self._active.pop(tracked.launch_id, None)
        if not tracked.lost:
            pull_from_agent(tracked, self._agent(tracked.node))
        why = "its node was lost" if tracked.lost else text.splitlines()[0][:300]
        out.append(killed(tracked.launch_id, tracked.mirror, why, oom))

    def _report_failed(self, tracked: Tracked, message: str, out: list[Observation]) -> None:
        self._active.pop(tracked.launch_id, None)
        out.append(LaunchFailed(tracked.launch_id, message, time.time()))

    # ---- nodes ------------------------------------------------------------------------------

    def _check_nodes(self, out: list[Observation]) -> None:
        try:
            live = rc.perdure_nodes()
            draining = rc.draining_nodes()
        except (RayError, ConnectionError, TimeoutError):
            return
        for name, node in list(self._live.items()):
            if node.node_id in draining:
                self._drained(name, node.node_id, draining[node.node_id], out)
        for name in set(self._live) - set(live):
            self._lose_node(name, out)
        for name, node in live.items():
            # Back only as a new Ray node: the GCS lists a dead one as alive for a while.
            if name in self._lost and node.node_id != self._lost.nodes[name][1]:
                self._lost.back(name, out)
                self._agents.pop(name, None)
                self._spares.forget(name)
        self._live = {n: v for n, v in live.items() if n not in self._lost}

    def _drained(self, name: str, node_id: str, deadline_ms: int,
                 out: list[Observation]) -> None:
        """Ray drains a node: with a deadline a preemption, without one maintenance."""
        self._lost.lose(name, out, node_id, "preempt-node" if deadline_ms else "drain-node",
                        "Ray drains it")
        self._live.pop(name, None)
        self._spares.forget(name)

    def _lose_node(self, name: str, out: list[Observation]) -> None:
        gone = self._live.get(name)
        if not self._lost.lose(name, out, gone.node_id if gone is not None else ""):
            return
        self._live.pop(name, None)
        self._agents.pop(name, None)
        self._spares.forget(name)
        for tracked in self._active.values():
            if tracked.node == name:
                tracked.lost = True

    def _agent_answers(self, node: str) -> bool:
        if node in self._lost:
            return False
        live = self._live.get(node)
        # A raylet port that refuses settles it in a round trip, not PROBE_SECONDS.
        if live is not None and rc.raylet_refuses(live):
            return False
        try:
            ray.get(self._agent(node).info.remote(), timeout=PROBE_SECONDS)
            return True
        except (RayError, GetTimeoutError):
            return False

    # ---- restart ----------------------------------------------------------------------------

    def adopt(self, launch_ids: list[str]) -> list[Observation]:
        self._attach()
        out: list[Observation] = []
        for launch_id in launch_ids:
            if launch_id in self._active:
                continue
            mirror_dir = statedir.launch_dir(self.state_dir, launch_id)
            record = statedir.read_json(os.path.join(mirror_dir, statedir.LAUNCH))
            actor = (rc.find_launch(launch_id, self.ns, record.get("actor"))
                     if record is not None else None)
            if record is None or actor is None:
                out.append(LaunchFailed(launch_id, f"launch {launch_id} has no actor in Ray "
                                        f"namespace {self.ns!r}: it never started, or its "
                                        "node was lost while no controller watched",
                                        time.time()))
                continue
            tracked = Tracked(launch_id, str(record["node"]), actor,
                               Mirror(self.state_dir, launch_id, str(record["log_prefix"])))
            self._ask(tracked, replies.STARTED)
            self._active[launch_id] = tracked
        return out

    def close(self) -> None:
        self._active.clear()
        with contextlib.suppress(RayError):
            self._spares.close()
        if self._transport is not None:  # its socket and threads: a relay left open would
            self._transport.close()      # keep a new controller of this process off its port
            self._transport = None
        if self._lock is not None:  # None: another controller holds the namespace
            with contextlib.suppress(RayError):
                ray.kill(self._lock)
            self._lock = None
