"""What the agent-based backends (Slurm, Kubernetes) do alike: their launches, from the
controller's call to the node agent, and their links to those agents.

An agent gone while its allocation still runs, or silent for HEARTBEAT_SECONDS, is a lost
node; it is back once its platform has shown it down and usable again.

Side effects: the launches' records and mirrors in the state dir, messages to agents, the
backend's log.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
import os
import queue
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from perdure import statedir
from perdure.backends.agents import reports
from perdure.backends.agents.alloc import Alloc
from perdure.backends.agents.hub import Agent, Hub, load_secret
from perdure.backends.agents.reports import Tracked
from perdure.backends.base import Backend, LaunchError
from perdure.backends.launchdir import launch_record
from perdure.backends.local.progress import ProgressReader
from perdure.backends.lostnodes import LostNodes, killed
from perdure.backends.masterport import MasterPorts
from perdure.backends.node import logcap, warm
from perdure.backends.node.mirror import Mirror
from perdure.backends.node.transport import LaunchTransport
from perdure.backends.spareholds import SpareHolds
from perdure.core.events import (
    Command,
    Launch,
    LaunchFailed,
    LaunchQueued,
    NodeCheckFailed,
    Observation,
    ReplicaExited,
    Stop,
)

HEARTBEAT_SECONDS = 3.0  # an agent silent this long is on a lost node
AGENT_START_SECONDS = 60.0  # an agent step that has not connected by then: its node is lost
PORT_SECONDS = 5.0  # how long rank 0's agent has to name a free port
RELEASE_SECONDS = 5.0  # an allocation with no launch this long is given back


# Reads the allocations' states from the platform now and acts on what changed.
Refresh = Callable[[list[Observation]], None]


class AgentLinks:
    """The launches, allocations and node agents of one agent-based backend; `platform` and
    `unit` name the platform and an allocation ("Slurm", "Slurm job")."""

    def __init__(self, state_dir: str, log_path: str, platform: str, unit: str) -> None:
        self.state_dir = state_dir
        self.log_path = log_path
        self.platform, self.unit = platform, unit
        self.warm = (warm.pool_size(None), warm.idle_seconds(None))
        self.log_max_bytes = logcap.max_bytes()  # ValueError naming $PERDURE_LOG_MAX_MB
        self.hub: Hub | None = None
        self.transport: LaunchTransport | None = None
        self.allocs: list[Alloc] = []
        self.active: dict[str, Tracked] = {}
        self.agents: dict[tuple[str, str], Agent] = {}
        self.lost = LostNodes()
        self.seen_down: set[str] = set()  # lost nodes the platform has shown down since
        self.addresses: dict[str, str] = {}
        self.checks_failed: set[tuple[str, str]] = set()  # (allocation, node) reported
        self.progress = ProgressReader()  # the launches' progress, from their mirrored copies
        self.masters = MasterPorts()
        self.holds = SpareHolds()  # the spare nodes each attempt holds (`hold_nodes`)
        self.pending: list[Observation] = []
        os.makedirs(os.path.join(state_dir, statedir.LAUNCHES), exist_ok=True)

    def start(self, host: str, directory: str) -> Hub:
        self.transport = LaunchTransport(self.state_dir, "net", host=host)
        self.transport.ensure()
        self.hub = Hub(directory, host, load_secret(directory))
        return self.hub

    def close(self) -> None:
        if self.hub is not None:
            self.hub.close()
        if self.transport is not None:
            self.transport.close()

    def log(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        with open(self.log_path, "a") as f:
            f.write(f"{stamp} {line}\n")

    # ---- the allocations' launches and holds ------------------------------------------------

    def launches_of(self, alloc: Alloc) -> list[Tracked]:
        return [t for t in self.active.values() if t.alloc is alloc]

    def idle(self, alloc: Alloc) -> bool:
        """Whether `alloc` holds neither a launch nor a spare."""
        return (not self.holds.among(alloc.job_id, alloc.attempt, alloc.nodes)
                and not self.launches_of(alloc))

    def releasable(self, now: float) -> Iterator[Alloc]:
        """The allocations idle for RELEASE_SECONDS, or idle with nothing to come back (nodes
        lost, job preempted, a later attempt begun)."""
        for alloc in list(self.allocs):
            if not alloc.slurm_id or not self.idle(alloc):
                alloc.idle_since = None
                continue
            if alloc.idle_since is None:
                alloc.idle_since = now
            later = any(t.launch.job_id == alloc.job_id
                        and t.launch.env.get("PERDURE_ATTEMPT") != alloc.attempt
                        for t in self.active.values())
            if not alloc.nodes or alloc.noticed or later or (
                    now - alloc.idle_since >= RELEASE_SECONDS):
                yield alloc

    def queued(self, alloc: Alloc, reason: str, out: list[Observation]) -> None:
        """The allocation's launches wait in the platform's queue for `reason` ("": no more)."""
        alloc.told = reason
        for tracked in self.launches_of(alloc):
            out.append(LaunchQueued(tracked.launch.launch_id, reason, time.time(),
                                    self.platform, f"{self.unit} {alloc.slurm_id}"))

    def notice(self, alloc: Alloc, why: str, out: list[Observation]) -> None:
        """A preemption's notice for `alloc` (once): the job saves and suspends."""
        if alloc.noticed:
            return
        alloc.noticed = True
        self.log(f"{alloc.job_id} attempt {alloc.attempt}: {why}: preempting the job")
        out.append(Command("preempt", alloc.job_id, time.time()))

    def submit(self, make: Callable[[Alloc, list[Tracked]], str], out: list[Observation]
               ) -> None:
        """Submit the new allocations with `make` (its error, "" when it made one); one that
        holds neither a launch nor a spare is dropped."""
        for alloc in self.allocs:
            if alloc.slurm_id or alloc.ending:
                continue
            if self.idle(alloc):
                alloc.ending = True
                continue
            launches = self.launches_of(alloc)
            error = make(alloc, launches)
            if error:
                alloc.ending = True
                for tracked in launches:
                    self.active.pop(tracked.launch.launch_id, None)
                    out.append(LaunchFailed(tracked.launch.launch_id, error, time.time()))
        self.allocs = [a for a in self.allocs if a.slurm_id or not a.ending]

    # ---- launch, stop, adopt ----------------------------------------------------------------

    def launch(self, launch: Launch, joins: Callable[[Launch, str], Alloc | None]) -> None:
        """Record and track a new launch in the allocation `joins` names, else a new one."""
        assert self.transport is not None
        if launch.launch_id in self.active:
            raise LaunchError(f"cannot launch {launch.launch_id!r}: it is already running")
        mirror = Mirror(self.state_dir, launch.launch_id, launch.log_prefix)
        if mirror.read_record(statedir.LAUNCH) is not None:
            raise LaunchError(f"launch id {launch.launch_id!r} was already used; every "
                              "launch needs a new id")
        launch = dataclasses.replace(launch, env=self.transport.env(launch))
        attempt = launch.env.get("PERDURE_ATTEMPT", "0")
        alloc = joins(launch, attempt)
        if alloc is None:
            alloc = Alloc(launch.job_id, attempt, [launch.node])
            self.allocs.append(alloc)
        mirror.write_record(statedir.LAUNCH, {
            "launch_id": launch.launch_id, "job_id": launch.job_id, "replica": launch.replica,
            "node": launch.node, "log_prefix": launch.log_prefix, "created": time.time()})
        self.active[launch.launch_id] = Tracked(launch, alloc, mirror)

    def _agent_of(self, tracked: Tracked) -> Agent | None:
        return self.agents.get((tracked.alloc.slurm_id, tracked.launch.node))

    def stop(self, stop: Stop) -> None:
        """Stop a launch through its agent; one not yet dispatched exits at the next poll."""
        tracked = self.active.get(stop.launch_id)
        if tracked is None:
            return
        if not tracked.dispatched:
            self.active.pop(stop.launch_id)
            self.pending.append(ReplicaExited(stop.launch_id, 128 + int(stop.signal),
                                              time.time(), signal=int(stop.signal)))
            return
        grace = max(0.0, stop.grace)
        # The relay answers the replica's "is this a notice?" from this record.
        tracked.mirror.write_record(statedir.STOP, statedir.stop_record(
            stop.signal, grace, stop.reason, stop.notice))
        agent = self._agent_of(tracked)
        if agent is not None:
            agent.send({"op": "stop", "launch_id": stop.launch_id, "signal": int(stop.signal),
                        "grace": grace, "reason": stop.reason, "notice": stop.notice})

    def kill_node(self, node: str) -> None:
        for tracked in [t for t in self.active.values() if t.launch.node == node]:
            self.stop(Stop(tracked.launch.launch_id, signal.SIGKILL, 0.0,
                           f"node {node} killed"))

    def adopt(self, launch_ids: list[str], where: str, gone: str) -> list[Observation]:
        """Track again the launches whose allocation (their record's `where`) still runs;
        the others fail, `gone` saying why."""
        out: list[Observation] = []
        for lid in launch_ids:
            if lid in self.active:
                continue
            record = statedir.read_json(os.path.join(statedir.launch_dir(self.state_dir, lid),
                                                     statedir.LAUNCH))
            alloc = next((a for a in self.allocs if record is not None
                          and a.slurm_id == record.get(where)), None)
            if record is None or alloc is None or record.get("node") not in alloc.nodes:
                out.append(LaunchFailed(lid, f"launch {lid}: {gone} (it ended while no "
                                        "controller watched)", time.time()))
                continue
            launch = Launch(lid, str(record["job_id"]), str(record["replica"]),
                            str(record["node"]), tuple(record["command"]), dict(record["env"]),
                            str(record["cwd"]), record.get("memory_mb"),
                            str(record["log_prefix"]), int(record.get("gpus") or 0))
            self.active[lid] = Tracked(launch, alloc,
                                       Mirror(self.state_dir, lid, launch.log_prefix),
                                       dispatched=True)
        return out

    # ---- dispatch ---------------------------------------------------------------------------

    def ready(self) -> Iterator[tuple[Tracked, Agent, dict[str, str]]]:
        """The launches to hand over (allocation running, agent and rank 0's agent
        connected), each with its env and rank 0's address and port."""
        for tracked in list(self.active.values()):
            agent = self._agent_of(tracked)
            env = dict(tracked.launch.env)
            if (not tracked.dispatched and tracked.alloc.running and agent is not None
                    and self._place_master(env, tracked.launch)):
                yield tracked, agent, env

    def _place_master(self, env: dict[str, str], launch: Launch) -> bool:
        """False while rank 0's agent is not up; a lost rank 0 node changes nothing (the
        group restarts anyway)."""
        master = env.get("PERDURE_MASTER_NODE", "")
        if not master or master in self.lost:
            return True
        agent = next((a for (alloc_id, name), a in self.agents.items() if name == master
                      and any(x.slurm_id == alloc_id and x.job_id == launch.job_id
                              for x in self.allocs)), None)
        if agent is None:
            return False
        env["MASTER_ADDR"] = agent.address
        env["MASTER_PORT"] = self.masters.port(launch.job_id, launch.master_key,
                                               functools.partial(self._free_port, agent))
        return True

    def _free_port(self, agent: Agent) -> str | None:
        assert self.hub is not None
        answer = self.hub.request(agent, {"op": "port"}, PORT_SECONDS)
        return None if answer is None else str(answer["port"])

    def hand(self, tracked: Tracked, agent: Agent, env: dict[str, str],
             kept: Mapping[str, Any]) -> bool:
        """Send the launch to its agent and record it with `kept` (where it runs); False: the
        agent's connection just ended (the node's loss follows)."""
        launch = tracked.launch
        record = launch_record(launch, env, self.log_max_bytes)
        if not agent.send({"op": "launch", "record": record}):
            return False
        tracked.dispatched = True
        tracked.mirror.write_record(statedir.LAUNCH, {
            **record, "log_prefix": launch.log_prefix, "created": time.time(), **kept})
        return True

    # ---- the agents' reports, heartbeats and losses -----------------------------------------

    def drain(self, refresh: Refresh, out: list[Observation]) -> None:
        assert self.hub is not None
        while True:
            try:
                agent, frame = self.hub.events.get_nowait()
            except queue.Empty:
                return
            key = (agent.alloc, agent.node)
            if frame is None:
                if self.agents.get(key) is agent:
                    del self.agents[key]
                    self._agent_lost(refresh, agent, "its agent's connection ended", out)
            elif frame.get("t") == "hello":
                old = self.agents.get(key)
                if old is not None and old is not agent:
                    with contextlib.suppress(OSError):
                        old.sock.close()
                self.agents[key] = agent
                self.addresses[agent.node] = agent.address
                agent.send({"op": "track", "launches": {
                    t.launch.launch_id: dict(t.mirror.offsets) for t in self.active.values()
                    if t.dispatched and (t.alloc.slurm_id, t.launch.node) == key}})
            elif frame.get("t") == "report":
                self._report(refresh, agent, frame, out)

    def _report(self, refresh: Refresh, agent: Agent, frame: dict[str, object],
                out: list[Observation]) -> None:
        alloc = next((a for a in self.allocs if a.slurm_id == agent.alloc), None)
        if frame.get("notice") and alloc is not None and not alloc.noticed:
            # a preemption's notice, or a cancel: the platform's state tells which
            refresh(out)
            if alloc in self.allocs and alloc.running:
                self.notice(alloc, str(frame["notice"]), out)
        failed = frame.get("check_failed")
        if failed and (agent.alloc, agent.node) not in self.checks_failed:
            self.checks_failed.add((agent.alloc, agent.node))  # the node's preflight
            self.log(f"node {agent.node} failed its check: {failed}")
            out.append(NodeCheckFailed(agent.node, str(failed), time.time()))
        items = frame.get("launches")
        for lid, item in (items.items() if isinstance(items, dict) else []):
            tracked = self.active.get(lid)
            if tracked is None or (tracked.alloc.slurm_id, tracked.launch.node) != (
                    agent.alloc, agent.node):
                agent.send({"op": "forget", "launch_id": lid})
                continue
            if not reports.in_step(tracked, item):
                # a report from before a resync: ask for what the copy lacks
                agent.send({"op": "track", "launches": {lid: dict(tracked.mirror.offsets)}})
                continue
            if reports.apply(tracked, item, out, self.progress):
                self.active.pop(lid, None)
                agent.send({"op": "forget", "launch_id": lid})

    def _agent_lost(self, refresh: Refresh, agent: Agent, why: str,
                    out: list[Observation]) -> None:
        """An agent is gone: its node is lost if its allocation still runs (read now)."""
        alloc = next((a for a in self.allocs if a.slurm_id == agent.alloc), None)
        if alloc is None or alloc.ending:
            return
        refresh(out)
        if alloc in self.allocs and alloc.running:
            self.lose_node(agent.node, f"node {agent.node}: {why}", out)

    def heartbeats(self, refresh: Refresh, now: float, out: list[Observation]) -> None:
        for key, agent in list(self.agents.items()):
            if now - agent.last_seen > HEARTBEAT_SECONDS:
                del self.agents[key]
                with contextlib.suppress(OSError):
                    agent.sock.close()
                self._agent_lost(refresh, agent, f"no heartbeat for {HEARTBEAT_SECONDS:g}s",
                                 out)
        for alloc in self.allocs:
            for node, since in list(alloc.agents.items()):
                if ((alloc.slurm_id, node) not in self.agents and node in alloc.nodes
                        and now - since > AGENT_START_SECONDS and alloc.running):
                    alloc.agents[node] = now  # once per wait
                    self.lose_node(node, f"node {node}: its agent never connected", out)

    def lose_node(self, node: str, why: str, out: list[Observation]) -> None:
        for alloc in self.allocs:
            if node in alloc.nodes:
                alloc.nodes.remove(node)  # a replacement there gets a new allocation
        if not self.lost.lose(node, out):
            return
        self.log(why)
        self.seen_down.discard(node)
        for tracked in [t for t in self.active.values() if t.launch.node == node]:
            self.gone(tracked, why, out)

    def end(self, alloc: Alloc, said: str, why: str, out: list[Observation]) -> None:
        with contextlib.suppress(ValueError):
            self.allocs.remove(alloc)
        alloc.ending = True
        self.log(f"{alloc.job_id} attempt {alloc.attempt}: {said}")
        for tracked in self.launches_of(alloc):
            self.gone(tracked, why, out)

    def gone(self, tracked: Tracked, why: str, out: list[Observation]) -> None:
        self.active.pop(tracked.launch.launch_id, None)
        if not tracked.dispatched:
            out.append(LaunchFailed(tracked.launch.launch_id, why, time.time()))
            return
        out.append(killed(tracked.launch.launch_id, tracked.mirror, why))

    def restore(self, usable: Mapping[str, bool], after: float, now: float,
                out: list[Observation]) -> None:
        """A lost node is back once `usable` (the platform's word) has shown it down and
        usable again, or usable `after` seconds from its loss."""
        for node, (since, _) in list(self.lost.nodes.items()):
            if node not in usable:
                continue
            if not usable[node]:
                self.seen_down.add(node)
            elif node in self.seen_down or now - since > after:
                self.lost.back(node, out)


class AgentBackend(Backend):
    """A backend whose replicas run under node agents (`links`); it adds its platform."""

    links: AgentLinks
    WHERE = ""  # the launch record's field naming its allocation
    GONE = ""  # why an adopted launch whose allocation is gone fails

    @abc.abstractmethod
    def _attach(self) -> None:
        """Start the hub and relay and find this state dir's allocations, on first use."""

    @abc.abstractmethod
    def _joins(self, launch: Launch, attempt: str) -> Alloc | None:
        """The allocation a new launch runs in (None: a new one)."""

    @abc.abstractmethod
    def _give_back(self, alloc: Alloc, grace: int) -> None:
        """End `alloc` on its platform."""

    def launch(self, launch: Launch) -> None:
        self._attach()
        self.links.launch(launch, self._joins)

    def stop(self, stop: Stop) -> None:
        self.links.stop(stop)

    def kill_node(self, node: str) -> None:
        self.links.kill_node(node)

    def adopt(self, launch_ids: list[str]) -> list[Observation]:
        self._attach()
        return self.links.adopt(launch_ids, self.WHERE, self.GONE)

    def _release(self, now: float) -> None:
        for alloc in self.links.releasable(now):
            self._give_back(alloc, grace=1 if alloc.nodes else 0)

    def close(self) -> None:
        """Stop watching: allocations with launches run on (a restart re-attaches); those
        that hold none are given back now."""
        for alloc in list(self.links.allocs):
            if alloc.slurm_id and self.links.idle(alloc):
                self._give_back(alloc, grace=1)
        self.links.close()
