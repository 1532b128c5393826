"""Run replicas on a Slurm cluster: an allocation per attempt, a node agent per node.

The first launches of an attempt submit a holder job over their nodes (`allocs`); while Slurm
queues it the launches wait (Slurm's state and reason are in `<state>/slurm/allocs.json` and
the controller's log). Once it runs, a node agent starts as a step on each node and connects
to this controller's hub; each launch is handed to its node's agent (`agents.links`), and a
step named after the launch (`step`) shows the replica to Slurm. A restart is a new launch in
the allocation the attempt holds: no new queue wait. A launch on a node the allocation lacks
(a replacement) gets a further allocation of that node. A node that fails its preflight check
is quarantined (core) and left out of every later allocation (`fence_nodes`).

A lost node is restored once Slurm has seen it down and back. The holder's notices (the time
limit's warning, a preemption's SIGTERM) and an agent's SIGTERM become a `preempt` of the job;
an allocation that ends otherwise (scancel from outside) a `cancel`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

from perdure import statedir
from perdure.backends.agents.alloc import Alloc
from perdure.backends.agents.links import AgentLinks
from perdure.backends.base import Backend, NodeInfo
from perdure.backends.slurm import allocs as al
from perdure.backends.slurm import slurmcmd
from perdure.backends.slurm.platform import PlatformWatch
from perdure.core.clusterspec import ClusterSpec, SlurmSpec
from perdure.core.events import Command, HoldNodes, Launch, LaunchFailed, Observation, Stop

SQUEUE_SECONDS = 0.5  # how often the allocations' states are read
SINFO_SECONDS = 2.0  # how often lost nodes are looked at (to restore them)
RESTORE_SECONDS = 60.0  # a lost node Slurm never showed down is restored after this
WARNING_MARGIN = 10  # seconds added to the grace for the time limit's warning
ADDRESS_ENV = "PERDURE_SLURM_ADDRESS"  # the address agents reach this controller at
DRAIN_REASON_CHARS = 200  # of the reason perdure gives Slurm's drain (sinfo shows it)


class SlurmBackend(Backend):
    """Replicas as job steps of per-attempt Slurm allocations (see the module docstring)."""

    def __init__(self, state_dir: os.PathLike[str] | str, cluster: ClusterSpec) -> None:
        self.spec: SlurmSpec = cluster.slurm or SlurmSpec()
        self.state_dir = os.path.realpath(state_dir)
        self.dir = os.path.join(self.state_dir, statedir.SLURM)
        statedir.private_dirs(self.dir)
        self.links = AgentLinks(self.state_dir, os.path.join(self.dir, statedir.SLURM_LOG))
        self.prefix = al.name_prefix(self.state_dir)
        self._configured = [NodeInfo(n.name, n.slots, gpus=n.gpus) for n in cluster.nodes]
        self._procs: list[subprocess.Popen[bytes]] = []
        self._next_squeue = self._next_sinfo = 0.0
        self._fenced: dict[str, str] = {}  # quarantined nodes (core/health.py) -> why
        self._platform = PlatformWatch(self.spec.partition)
        self._health = cluster.health  # its preflight runs on each node by the agent

    # ---- attach -----------------------------------------------------------------------------

    def _attach(self) -> None:
        """Start the hub and relay, find this state dir's allocations (a restarted
        controller's), on first use once the controller holds the state dir."""
        if self.links.hub is not None:
            return
        self.links.start(os.environ.get(ADDRESS_ENV) or slurmcmd.own_address(), self.dir)
        for info in slurmcmd.jobs(self.prefix).values():
            ids = al.parse_name(self.prefix, info.name)
            if ids is None or not (info.running or info.state == "PENDING"):
                continue
            alloc = Alloc(ids[0], ids[1], slurmcmd.expand(info.nodes), slurm_id=info.job_id,
                             state=info.state, reason=info.reason, ran=info.running)
            # its agents run on: they connect to the hub again at the recorded address
            alloc.agents = {n: time.monotonic() for n in alloc.nodes} if alloc.ran else {}
            self.links.allocs.append(alloc)

    def nodes(self) -> list[NodeInfo]:
        self._attach()
        found = {n.name: n for n in slurmcmd.nodes(self.spec.partition)}
        addresses = self.links.addresses
        addresses.update({n.name: n.address for n in found.values()})
        if self._configured:  # GPUs the file leaves out are Slurm's count (its gres)
            return [NodeInfo(n.name, n.slots, addresses.get(n.name),
                             n.gpus if n.gpus is not None else
                             found[n.name].gpus if n.name in found else 0)
                    for n in self._configured]
        return [NodeInfo(n.name, n.cpus, n.address, n.gpus)
                for n in sorted(found.values(), key=lambda n: n.name)]

    # ---- launch and stop --------------------------------------------------------------------

    def launch(self, launch: Launch) -> None:
        self._attach()
        self.links.launch(launch, self._joins)

    def _joins(self, launch: Launch, attempt: str) -> Alloc | None:
        """The allocation this launch runs in: its attempt's that holds its node, else the
        attempt's not yet submitted one (the node joins it); None: a new one."""
        mine = [a for a in self.links.allocs if a.job_id == launch.job_id
                and a.attempt == attempt and not a.ending]
        for alloc in mine:
            if launch.node in alloc.nodes:
                return alloc
        for alloc in mine:
            if not alloc.slurm_id:
                alloc.nodes.append(launch.node)
                return alloc
        return None

    def stop(self, stop: Stop) -> None:
        self.links.stop(stop)

    def kill_node(self, node: str) -> None:
        self.links.kill_node(node)

    def hold_nodes(self, hold: HoldNodes) -> None:
        """The spare nodes `hold.job_id`'s attempt holds: kept in its allocation (a further
        one when that was already submitted) with an agent and warm pool each, so a lost
        node's replicas launch on one at once, no new queue wait. An allocation that holds
        neither a launch nor a spare is given back (`_release`)."""
        self._attach()
        key = self.links.holds.update(hold)
        mine = [a for a in self.links.allocs if (a.job_id, a.attempt) == key and not a.ending]
        new = [n for n in hold.nodes if not any(n in a.nodes for a in mine)]
        if not new:
            return
        unsubmitted = next((a for a in mine if not a.slurm_id), None)
        if unsubmitted is not None:
            unsubmitted.nodes.extend(new)
            return
        like = mine[0] if mine else Alloc(*key, [])
        self.links.allocs.append(Alloc(*key, new, cpus=like.cpus, gpus=like.gpus,
                                       warning=like.warning))

    def _queued(self, alloc: Alloc, reason: str, out: list[Observation]) -> None:
        """`alloc`'s launches wait in Slurm's queue for `reason` ("": it started)."""
        self.links.queued(alloc, reason, "Slurm", f"Slurm job {alloc.slurm_id}", out)

    # ---- observe ----------------------------------------------------------------------------

    def poll(self) -> list[Observation]:
        self._attach()
        out, self.links.pending = self.links.pending, []
        now = time.monotonic()
        self._submit(out)
        if now >= self._next_squeue:
            self._next_squeue = now + SQUEUE_SECONDS
            self.refresh(out)
        self.links.drain(self, out)
        self.links.heartbeats(self, now, out)
        if self.links.down and now >= self._next_sinfo:
            self._next_sinfo = now + SINFO_SECONDS
            with contextlib.suppress(slurmcmd.SlurmError):
                usable = {n.name: n.usable for n in slurmcmd.nodes(self.spec.partition)}
                self.links.restore(usable, RESTORE_SECONDS, now, out)
        busy = {t.launch.node for t in self.links.active.values()}
        self._platform.step(busy, self._fenced.keys(), out)
        self._dispatch(out)
        self._release(now)
        self._procs = [p for p in self._procs if p.poll() is None]
        return out

    def fence_nodes(self, fenced: dict[str, str]) -> None:
        """Quarantined nodes: excluded from every later allocation; with
        `slurm.drain_bad_nodes`, each newly quarantined one drained in Slurm with the reason."""
        new = [n for n in fenced if n not in self._fenced]
        self._fenced = dict(fenced)
        if not self.spec.drain_bad_nodes:
            return
        failed = []
        for node in new:
            try:
                slurmcmd.drain(node, f"perdure quarantine: {fenced[node]}"[:DRAIN_REASON_CHARS])
            except slurmcmd.SlurmError as exc:
                failed.append(f"{node}: {exc}")
        if failed:
            raise slurmcmd.SlurmError("could not drain " + "; ".join(failed))

    def _submit(self, out: list[Observation]) -> None:
        for alloc in self.links.allocs:
            if alloc.slurm_id or alloc.ending:
                continue
            launches = self.links.launches_of(alloc)
            if not launches and not self.links.holds_spare(alloc):
                alloc.ending = True
                continue
            if launches:  # else spares alone: sized as the attempt's first allocation
                alloc.cpus = max(sum(t.launch.node == n for t in launches) for n in alloc.nodes)
                alloc.gpus = max(sum(t.launch.gpus for t in launches if t.launch.node == n)
                                 for n in alloc.nodes)
                grace = float(launches[0].launch.env.get("PERDURE_GRACE_SECONDS", "30"))
                alloc.warning = int(grace) + WARNING_MARGIN
            try:
                exclude = sorted(set(self._fenced) - set(alloc.nodes))
                al.submit(alloc, self.spec, self.prefix, alloc.warning, exclude)
            except slurmcmd.SlurmError as err:
                alloc.ending = True
                for t in launches:
                    self.links.active.pop(t.launch.launch_id, None)
                    out.append(LaunchFailed(t.launch.launch_id, f"sbatch: {err}", time.time()))
        self.links.allocs = [a for a in self.links.allocs if a.slurm_id or not a.ending]
        self._save()

    def _save(self) -> None:
        statedir.write_json(os.path.join(self.dir, statedir.ALLOCS), {"allocations": [
            {"slurm_id": a.slurm_id, "job_id": a.job_id, "attempt": a.attempt,
             "nodes": a.nodes, "state": a.state, "reason": a.reason}
            for a in self.links.allocs]})

    def refresh(self, out: list[Observation]) -> None:
        """Read the allocations' states from squeue and act on what changed."""
        try:
            infos = slurmcmd.jobs(self.prefix)
        except slurmcmd.SlurmError:
            return  # slurmctld busy or restarting: next time
        changed = False
        for alloc in [a for a in self.links.allocs if a.slurm_id]:
            info = infos.get(alloc.slurm_id)
            state = info.state if info is not None else "GONE"
            changed |= (state, info.reason if info else "") != (alloc.state, alloc.reason)
            alloc.state, alloc.reason = state, info.reason if info is not None else ""
            if info is not None and info.running:
                if not alloc.ran:
                    alloc.ran = True
                    self._start_agents(alloc)
                    self._queued(alloc, "", out)
                if info.comment in slurmcmd.NOTICES:
                    self.notice(alloc, info.comment, out)
            elif state == "PENDING":
                if alloc.reason not in ("", "None") and alloc.reason != alloc.told:
                    self._queued(alloc, alloc.reason, out)
            else:
                self._ended(alloc, state, out)
        if changed:
            self._save()
            for alloc in self.links.allocs:
                self.links.log(f"{alloc.job_id} attempt {alloc.attempt}: {alloc.describe()} "
                               f"on {','.join(alloc.nodes)}")

    def _start_agents(self, alloc: Alloc) -> None:
        hub = self.links.hub
        assert hub is not None
        for node in alloc.nodes:
            if node not in alloc.agents:
                check = al.node_check(alloc, self._health,
                                      (t.launch for t in self.links.active.values()))
                self._procs.append(al.start_agent(alloc, node, hub.address, hub.secret,
                                                  self.links.warm, self.dir, check))

    def notice(self, alloc: Alloc, why: str, out: list[Observation]) -> None:
        """A preemption or time-limit notice for `alloc`: the job saves and suspends."""
        if alloc.noticed:
            return
        alloc.noticed = True
        out.append(Command("preempt", alloc.job_id, time.time()))

    def _ended(self, alloc: Alloc, state: str, out: list[Observation]) -> None:
        """The allocation ended, not by perdure (which drops one it cancels): preempted or
        out of time -> the job suspends; cancelled from outside -> the job is cancelled."""
        if self.links.launches_of(alloc):
            if state in ("PREEMPTED", "TIMEOUT", "REQUEUED", "NODE_FAIL") or alloc.noticed:
                self.notice(alloc, state, out)
            else:
                out.append(Command("cancel", alloc.job_id, time.time()))
        self.links.end(alloc, f"{alloc.describe()}: ended",
                       f"its allocation ended ({alloc.describe()})", out)

    # ---- dispatch and release ---------------------------------------------------------------

    def _dispatch(self, out: list[Observation]) -> None:
        for tracked, agent in self.links.ready():
            env = dict(tracked.launch.env)
            if not self.links.place_master(env, tracked.launch):
                continue  # rank 0's node agent is not up yet
            if self.links.hand(tracked, agent, env, {"slurm_job": tracked.alloc.slurm_id}):
                self._procs.append(al.start_watcher(tracked.alloc, tracked.launch.node,
                                                    tracked.launch.launch_id, self.dir))

    def _release(self, now: float) -> None:
        for alloc in self.links.releasable(now):
            alloc.ending = True
            self.links.allocs.remove(alloc)
            with contextlib.suppress(slurmcmd.SlurmError):
                slurmcmd.cancel(alloc.slurm_id)
            self._save()

    # ---- restart ----------------------------------------------------------------------------

    def adopt(self, launch_ids: list[str]) -> list[Observation]:
        self._attach()
        return self.links.adopt(launch_ids, "slurm_job", "its Slurm allocation is gone")

    def close(self) -> None:
        """Stop watching: allocations with launches, their agents and replicas run on (a
        restart re-attaches); allocations that hold none are given back now."""
        for alloc in self.links.allocs:
            if alloc.slurm_id and self.links.idle(alloc):
                with contextlib.suppress(slurmcmd.SlurmError):
                    slurmcmd.cancel(alloc.slurm_id)
        self.links.close()
