"""The launches of an agent-based backend (Slurm, Kubernetes), from the controller's call to
the node agent: each is recorded in the state dir and tracked until its allocation runs, then
handed to its node's agent (with rank 0's address and port), stopped through that agent, and
found again after a controller restart. Each backend says which allocation a launch runs in
and what its platform adds to what is sent and kept.

Plain functions over the backend's own tables (its launches, agents, allocations).

Side effects: the launches' records in the state dir, messages to agents.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from perdure import statedir
from perdure.backends.agents.alloc import Alloc
from perdure.backends.agents.hub import Agent, Hub
from perdure.backends.agents.reports import Tracked
from perdure.backends.base import LaunchError
from perdure.backends.masterport import MasterPorts
from perdure.backends.node.mirror import Mirror
from perdure.backends.node.transport import LaunchTransport
from perdure.core.events import Launch, LaunchFailed, LaunchQueued, Observation, ReplicaExited, Stop

PORT_SECONDS = 5.0  # how long rank 0's agent has to name a free port


def begin(active: dict[str, Tracked], allocs: list[Alloc], state_dir: str,
          transport: LaunchTransport, launch: Launch,
          joins: Callable[[Launch, str], Alloc | None]) -> None:
    """Record a new launch (its env with the relay's variables) and track it in the
    allocation of its attempt that `joins` names, else in a new one of its node;
    LaunchError for a launch id running or used before."""
    if launch.launch_id in active:
        raise LaunchError(f"cannot launch {launch.launch_id!r}: it is already running")
    mirror = Mirror(state_dir, launch.launch_id, launch.log_prefix)
    if mirror.read_record(statedir.LAUNCH) is not None:
        raise LaunchError(f"launch id {launch.launch_id!r} was already used; every "
                          "launch needs a new id")
    launch = dataclasses.replace(launch, env=transport.env(launch))  # rounds, reports, notices
    attempt = launch.env.get("PERDURE_ATTEMPT", "0")
    alloc = joins(launch, attempt)
    if alloc is None:
        alloc = Alloc(launch.job_id, attempt, [launch.node])
        allocs.append(alloc)
    mirror.write_record(statedir.LAUNCH, {
        "launch_id": launch.launch_id, "job_id": launch.job_id, "replica": launch.replica,
        "node": launch.node, "log_prefix": launch.log_prefix, "created": time.time()})
    active[launch.launch_id] = Tracked(launch, alloc, mirror)


def agent_of(agents: dict[tuple[str, str], Agent], tracked: Tracked) -> Agent | None:
    """The connected agent of the launch's node in its allocation (None: not connected)."""
    return agents.get((tracked.alloc.slurm_id, tracked.launch.node))


def stop(active: dict[str, Tracked], agents: dict[tuple[str, str], Agent], stop: Stop,
         pending: list[Observation]) -> None:
    """Stop a launch through its agent; one still waiting for its allocation never ran: it
    exits at once (in `pending`) as if the signal had ended it."""
    tracked = active.get(stop.launch_id)
    if tracked is None:
        return
    if not tracked.dispatched:
        active.pop(stop.launch_id)
        pending.append(ReplicaExited(stop.launch_id, 128 + int(stop.signal), time.time(),
                                     signal=int(stop.signal)))
        return
    grace = max(0.0, stop.grace)
    # The relay answers the replica's "is this a notice?" from this record.
    tracked.mirror.write_record(statedir.STOP, {
        "signal": int(stop.signal), "deadline": time.time() + grace,
        "reason": stop.reason, "notice": stop.notice})
    agent = agent_of(agents, tracked)
    if agent is not None:
        agent.send({"op": "stop", "launch_id": stop.launch_id, "signal": int(stop.signal),
                    "grace": grace, "reason": stop.reason, "notice": stop.notice})


def kill_node(active: dict[str, Tracked], agents: dict[tuple[str, str], Agent], node: str,
              pending: list[Observation]) -> None:
    """Chaos: SIGKILL every launch on `node`."""
    for tracked in [t for t in active.values() if t.launch.node == node]:
        stop(active, agents, Stop(tracked.launch.launch_id, signal.SIGKILL, 0.0,
                                  f"node {node} killed"), pending)


def ready(active: dict[str, Tracked], agents: dict[tuple[str, str], Agent]
          ) -> Iterator[tuple[Tracked, Agent]]:
    """The launches not yet handed over whose allocation runs and whose agent is connected."""
    for tracked in list(active.values()):
        agent = agent_of(agents, tracked)
        if not tracked.dispatched and tracked.alloc.running and agent is not None:
            yield tracked, agent


def place_master(env: dict[str, str], launch: Launch, hub: Hub,
                 agents: dict[tuple[str, str], Agent], allocs: list[Alloc],
                 down: dict[str, float], masters: MasterPorts) -> bool:
    """Rank 0's address and port into `env` (a port free on its node, the same for every
    launch of its master key); False while rank 0's node agent is not up yet. A launch whose
    rank 0 node is lost keeps what it has: the group restarts anyway."""
    master = env.get("PERDURE_MASTER_NODE", "")
    if not master or master in down:
        return True
    agent = next((a for (alloc_id, name), a in agents.items() if name == master and any(
        x.slurm_id == alloc_id and x.job_id == launch.job_id for x in allocs)), None)
    if agent is None:
        return False
    env["MASTER_ADDR"] = agent.address
    env["MASTER_PORT"] = masters.port(launch.job_id, launch.master_key,
                                      functools.partial(_free_port, hub, agent))
    return True


def _free_port(hub: Hub, agent: Agent) -> str | None:
    """A port free on `agent`'s node (None: its node is going)."""
    answer = hub.request(agent, {"op": "port"}, PORT_SECONDS)
    return None if answer is None else str(answer["port"])


def hand(tracked: Tracked, agent: Agent, env: dict[str, str], log_max_bytes: int,
         kept: dict[str, Any]) -> bool:
    """Send the launch, with `env`, to its agent; once sent it is dispatched and its record
    kept in the state dir with `kept` (where it runs; what it shows instead of the env).
    False: the agent's connection just ended (the node's loss follows)."""
    launch = tracked.launch
    record = {"launch_id": launch.launch_id, "job_id": launch.job_id,
              "replica": launch.replica, "node": launch.node,
              "command": list(launch.command), "env": env, "cwd": launch.cwd,
              "memory_mb": launch.memory_mb, "gpus": launch.gpus,
              "log_max_bytes": log_max_bytes}
    if not agent.send({"op": "launch", "record": record}):
        return False
    tracked.dispatched = True
    tracked.mirror.write_record(statedir.LAUNCH, {
        **record, "log_prefix": launch.log_prefix, "created": time.time(), **kept})
    return True


def queued(active: dict[str, Tracked], alloc: Alloc, reason: str, platform: str, what: str,
           out: list[Observation]) -> None:
    """The allocation's launches wait in the platform's queue for `reason` (the job shows
    QUEUED with it), or, with "", no longer: the allocation runs."""
    alloc.told = reason
    for tracked in [t for t in active.values() if t.alloc is alloc]:
        out.append(LaunchQueued(tracked.launch.launch_id, reason, time.time(), platform, what))


def adopt(active: dict[str, Tracked], allocs: list[Alloc], state_dir: str,
          launch_ids: list[str], where: str, gone: str) -> list[Observation]:
    """After a controller restart: track again the launches whose allocation still runs (its
    id in their record's `where` field); the others fail, `gone` saying why."""
    out: list[Observation] = []
    for lid in launch_ids:
        if lid in active:
            continue
        record = statedir.read_json(os.path.join(statedir.launch_dir(state_dir, lid),
                                                 statedir.LAUNCH))
        alloc = next((a for a in allocs if record is not None
                      and a.slurm_id == record.get(where)), None)
        if record is None or alloc is None or record.get("node") not in alloc.nodes:
            out.append(LaunchFailed(lid, f"launch {lid}: {gone} (it ended while no controller "
                                    "watched)", time.time()))
            continue
        launch = Launch(lid, str(record["job_id"]), str(record["replica"]),
                        str(record["node"]), tuple(record["command"]), dict(record["env"]),
                        str(record["cwd"]), record.get("memory_mb"),
                        str(record["log_prefix"]), int(record.get("gpus") or 0))
        active[lid] = Tracked(launch, alloc, Mirror(state_dir, lid, launch.log_prefix),
                              dispatched=True)
    return out
