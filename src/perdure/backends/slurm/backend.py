"""Run replicas on a Slurm cluster: a holder job per attempt, a node agent step per node.

While Slurm queues the holder its launches wait (`<state>/slurm/allocs.json`); a restart is a
new launch in the allocation the attempt holds: no new queue wait. A step named after each
launch (`step`) shows the replica to Slurm. The holder's notices (the time limit's warning,
a preemption) become a `preempt` of the job; an allocation that ends otherwise a `cancel`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

from perdure import statedir
from perdure.backends.agents.alloc import Alloc
from perdure.backends.agents.links import AgentBackend, AgentLinks
from perdure.backends.agents.reports import Tracked
from perdure.backends.base import NodeInfo
from perdure.backends.slurm import allocs as al
from perdure.backends.slurm import slurmcmd
from perdure.backends.slurm.platform import PlatformWatch
from perdure.core.clusterspec import ClusterSpec, SlurmSpec
from perdure.core.events import Command, HoldNodes, Launch, Observation

SQUEUE_SECONDS = 0.5  # how often the allocations' states are read
SINFO_SECONDS = 2.0  # how often lost nodes are looked at (to restore them)
RESTORE_SECONDS = 60.0  # a lost node Slurm never showed down is restored after this
WARNING_MARGIN = 10  # seconds added to the grace for the time limit's warning
ADDRESS_ENV = "PERDURE_SLURM_ADDRESS"  # the address agents reach this controller at
DRAIN_REASON_CHARS = 200  # of the reason perdure gives Slurm's drain (sinfo shows it)


class SlurmBackend(AgentBackend):
    WHERE, GONE = "slurm_job", "its Slurm allocation is gone"

    def __init__(self, state_dir: os.PathLike[str] | str, cluster: ClusterSpec) -> None:
        self.spec: SlurmSpec = cluster.slurm or SlurmSpec()
        self.state_dir = os.path.realpath(state_dir)
        self.dir = os.path.join(self.state_dir, statedir.SLURM)
        statedir.private_dirs(self.dir)
        self.links = AgentLinks(self.state_dir, os.path.join(self.dir, statedir.SLURM_LOG),
                                "Slurm", "Slurm job")
        self.prefix = al.name_prefix(self.state_dir)
        self._configured = [NodeInfo(n.name, n.slots, gpus=n.gpus) for n in cluster.nodes]
        self._procs: list[subprocess.Popen[bytes]] = []
        self._next_squeue = self._next_sinfo = 0.0
        self._fenced: dict[str, str] = {}  # quarantined nodes (core/health.py) -> why
        self._platform = PlatformWatch(self.spec.partition)
        self._health = cluster.health  # its preflight runs on each node by the agent

    # ---- attach -----------------------------------------------------------------------------

    def _attach(self) -> None:
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

    # ---- launch ----------------------------------------------------------------------------

    def _joins(self, launch: Launch, attempt: str) -> Alloc | None:
        """Its attempt's allocation that holds its node, else the unsubmitted one."""
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

    def hold_nodes(self, hold: HoldNodes) -> None:
        """The held spare nodes join the attempt's allocation (a further one once that was
        submitted), each with an agent and warm pool: no queue wait when a node is lost."""
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

    # ---- observe ----------------------------------------------------------------------------

    def poll(self) -> list[Observation]:
        self._attach()
        out, self.links.pending = self.links.pending, []
        now = time.monotonic()
        self._submit(out)
        if now >= self._next_squeue:
            self._next_squeue = now + SQUEUE_SECONDS
            self.refresh(out)
        self.links.drain(self.refresh, out)
        self.links.heartbeats(self.refresh, now, out)
        if self.links.lost.nodes and now >= self._next_sinfo:
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
        """Quarantined nodes: excluded from later allocations; drained in Slurm with
        `slurm.drain_bad_nodes`."""
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
        self.links.submit(self._sbatch, out)
        self._save()

    def _sbatch(self, alloc: Alloc, launches: list[Tracked]) -> str:
        if launches:  # else spares alone: sized as the attempt's first allocation
            alloc.cpus = max(sum(t.launch.node == n for t in launches) for n in alloc.nodes)
            alloc.gpus = max(sum(t.launch.gpus for t in launches if t.launch.node == n)
                             for n in alloc.nodes)
            grace = float(launches[0].launch.env.get("PERDURE_GRACE_SECONDS", "30"))
            alloc.warning = int(grace) + WARNING_MARGIN
        try:
            exclude = sorted(set(self._fenced) - set(alloc.nodes))
            al.submit(alloc, self.spec, self.prefix, exclude)
        except slurmcmd.SlurmError as err:
            return f"sbatch: {err}"
        return ""

    def _save(self) -> None:
        statedir.write_json(os.path.join(self.dir, statedir.ALLOCS), {"allocations": [
            {"slurm_id": a.slurm_id, "job_id": a.job_id, "attempt": a.attempt,
             "nodes": a.nodes, "state": a.state, "reason": a.reason}
            for a in self.links.allocs]})

    def refresh(self, out: list[Observation]) -> None:
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
                    self.links.queued(alloc, "", out)
                if info.comment in slurmcmd.NOTICES:
                    self.links.notice(alloc, info.comment, out)
            elif state == "PENDING":
                if alloc.reason not in ("", "None") and alloc.reason != alloc.told:
                    self.links.queued(alloc, alloc.reason, out)
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

    def _ended(self, alloc: Alloc, state: str, out: list[Observation]) -> None:
        """The allocation ended, not by perdure: preempted or out of time suspends the job,
        cancelled from outside cancels it."""
        if self.links.launches_of(alloc):
            if state in ("PREEMPTED", "TIMEOUT", "REQUEUED", "NODE_FAIL") or alloc.noticed:
                self.links.notice(alloc, state, out)
            else:
                out.append(Command("cancel", alloc.job_id, time.time()))
        self.links.end(alloc, f"{alloc.describe()}: ended",
                       f"its allocation ended ({alloc.describe()})", out)

    # ---- dispatch and give back -------------------------------------------------------------

    def _dispatch(self, out: list[Observation]) -> None:
        for tracked, agent, env in self.links.ready():
            if self.links.hand(tracked, agent, env, {"slurm_job": tracked.alloc.slurm_id}):
                self._procs.append(al.start_watcher(tracked.alloc, tracked.launch.node,
                                                    tracked.launch.launch_id, self.dir))

    def _give_back(self, alloc: Alloc, grace: int) -> None:
        alloc.ending = True
        self.links.allocs.remove(alloc)
        with contextlib.suppress(slurmcmd.SlurmError):
            slurmcmd.cancel(alloc.slurm_id)
        self._save()
