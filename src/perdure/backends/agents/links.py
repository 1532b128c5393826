"""An agent-based backend's links to its node agents: their reports, heartbeats and losses.

`AgentLinks` is the half of `SlurmBackend` (and of `KubernetesBackend`) that reads what the
hub received: an agent's hello
(it is told what the controller already has of its launches), its reports (applied by
`reports`), its end. An agent gone while its allocation still runs, or silent for
HEARTBEAT_SECONDS, is a lost node: a `fail-node` before its replicas' exits, so that none is
charged (each backend restores a lost node its own way: `_restore`). An agent
whose node failed its preflight check says so once: a `NodeCheckFailed` (the core
quarantines the node).

Side effects: through the backend: the mirror files, messages to agents, squeue.
"""

from __future__ import annotations

import contextlib
import queue
import time
from typing import TYPE_CHECKING

from perdure.backends.agents import reports
from perdure.backends.agents.alloc import Alloc
from perdure.backends.agents.hub import Agent, Hub
from perdure.backends.agents.reports import Tracked
from perdure.backends.local.progress import ProgressReader
from perdure.core.events import Command, LaunchFailed, NodeCheckFailed, Observation

HEARTBEAT_SECONDS = 3.0  # an agent silent this long is on a lost node
AGENT_START_SECONDS = 60.0  # an agent step that has not connected by then: its node is lost


class AgentLinks:
    """See the module docstring; the backend holds the state and its platform's side."""

    hub: Hub | None
    _allocs: list[Alloc]
    _active: dict[str, Tracked]
    _agents: dict[tuple[str, str], Agent]
    _down: dict[str, float]
    _seen_down: set[str]
    _addresses: dict[str, str]
    _checks_failed: set[tuple[str, str]]
    _progress: ProgressReader  # the launches' progress, read from their mirrored copies

    if TYPE_CHECKING:  # the backend's, which this half calls
        def _refresh(self, out: list[Observation]) -> None: ...

        def _notice(self, alloc: Alloc, why: str, out: list[Observation]) -> None: ...

        def _log(self, line: str) -> None: ...

    def _gone(self, tracked: Tracked, why: str, out: list[Observation]) -> None:
        """A launch whose agent is gone with its node or allocation: killed with it."""
        self._active.pop(tracked.launch.launch_id, None)
        if not tracked.dispatched:
            out.append(LaunchFailed(tracked.launch.launch_id, why, time.time()))
            return
        out.append(reports.lost(tracked, why))

    def _drain(self, out: list[Observation]) -> None:
        assert self.hub is not None
        while True:
            try:
                agent, frame = self.hub.events.get_nowait()
            except queue.Empty:
                return
            key = (agent.alloc, agent.node)
            if frame is None:
                if self._agents.get(key) is agent:
                    del self._agents[key]
                    self._agent_lost(agent, "its agent's connection ended", out)
            elif frame.get("t") == "hello":
                old = self._agents.get(key)
                if old is not None and old is not agent:
                    with contextlib.suppress(OSError):
                        old.sock.close()
                self._agents[key] = agent
                self._addresses[agent.node] = agent.address
                agent.send({"op": "track", "launches": {
                    t.launch.launch_id: dict(t.mirror.offsets) for t in self._active.values()
                    if t.dispatched and (t.alloc.slurm_id, t.launch.node) == key}})
            elif frame.get("t") == "report":
                self._report(agent, frame, out)

    def _report(self, agent: Agent, frame: dict[str, object], out: list[Observation]) -> None:
        alloc = next((a for a in self._allocs if a.slurm_id == agent.alloc), None)
        if frame.get("notice") and alloc is not None and not alloc.noticed:
            # SIGTERM: a preemption's notice (the allocation runs on, for GraceTime), or
            # a scancel (it is CANCELLED already): Slurm's state tells which
            self._refresh(out)
            if alloc in self._allocs and alloc.running:
                self._notice(alloc, str(frame["notice"]), out)
        failed = frame.get("check_failed")
        if failed and (agent.alloc, agent.node) not in self._checks_failed:
            self._checks_failed.add((agent.alloc, agent.node))  # the node's preflight
            self._log(f"node {agent.node} failed its check: {failed}")
            out.append(NodeCheckFailed(agent.node, str(failed), time.time()))
        items = frame.get("launches")
        for lid, item in (items.items() if isinstance(items, dict) else []):
            tracked = self._active.get(lid)
            if tracked is None or (tracked.alloc.slurm_id, tracked.launch.node) != (
                    agent.alloc, agent.node):
                agent.send({"op": "forget", "launch_id": lid})
                continue
            if not reports.in_step(tracked, item):
                # a report from before a resync: ask for what the copy lacks
                agent.send({"op": "track", "launches": {lid: dict(tracked.mirror.offsets)}})
                continue
            if reports.apply(tracked, item, out, self._progress):
                self._active.pop(lid, None)
                agent.send({"op": "forget", "launch_id": lid})

    def _agent_lost(self, agent: Agent, why: str, out: list[Observation]) -> None:
        """An agent is gone. Its allocation still running: its node is lost. Ended: the
        allocation's end explains it (read now, so it is not mistaken for a node's death)."""
        alloc = next((a for a in self._allocs if a.slurm_id == agent.alloc), None)
        if alloc is None or alloc.ending:
            return
        self._refresh(out)
        if alloc in self._allocs and alloc.running:
            self._lose_node(agent.node, f"node {agent.node}: {why}", out)

    def _heartbeats(self, now: float, out: list[Observation]) -> None:
        for key, agent in list(self._agents.items()):
            if now - agent.last_seen > HEARTBEAT_SECONDS:
                del self._agents[key]
                with contextlib.suppress(OSError):
                    agent.sock.close()
                self._agent_lost(agent, f"no heartbeat for {HEARTBEAT_SECONDS:g}s", out)
        for alloc in self._allocs:
            for node, since in list(alloc.agents.items()):
                if ((alloc.slurm_id, node) not in self._agents and node in alloc.nodes
                        and now - since > AGENT_START_SECONDS and alloc.running):
                    alloc.agents[node] = now  # once per wait
                    self._lose_node(node, f"node {node}: its agent never connected", out)

    def _lose_node(self, node: str, why: str, out: list[Observation]) -> None:
        """A node is gone: fail it (before its replicas' exits, so they are not charged)."""
        for alloc in self._allocs:
            if node in alloc.nodes:
                alloc.nodes.remove(node)  # a replacement there gets a new allocation
        if node in self._down:
            return
        self._log(why)
        self._down[node] = time.monotonic()
        self._seen_down.discard(node)
        out.append(Command("fail-node", node, time.time()))
        for tracked in [t for t in self._active.values() if t.launch.node == node]:
            self._gone(tracked, why, out)
