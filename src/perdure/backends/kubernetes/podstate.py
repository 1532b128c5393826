"""What Kubernetes does to an attempt's agent pods and their nodes, as perdure's observations.

`PodStates` is the half of `KubernetesBackend` that reads the watches (`watch`) and gives
pods back; it extends the Slurm backend's links to its node agents (their reports,
heartbeats and losses), which it serves as a Slurm allocation's state would. Per pod:

| the API server says                                   | perdure does                          |
| ----------------------------------------------------- | ------------------------------------- |
| Pending (unschedulable, gated by Kueue, pulling)      | its launches QUEUED with the reason   |
| Pending and never startable (Secret or image missing) | its launches fail with the reason     |
| Running                                               | its agent's launches are dispatched   |
| deleted with grace (eviction, drain), node cordoned   | `preempt` the job: save, SUSPENDED    |
| gone, force-deleted, Failed; its node NotReady        | `fail-node`: its replicas move        |

A lost node is back (`node-back`) once its Node is Ready and schedulable, having been seen
otherwise (or RESTORE_SECONDS after a pod alone was lost there).

Side effects: through the backend: pod deletions, messages to agents, the mirror files.
"""

from __future__ import annotations

import contextlib
import queue
import time
from typing import TYPE_CHECKING, Any

from perdure.backends.agents.alloc import Alloc
from perdure.backends.agents.hub import Agent
from perdure.backends.agents.links import AgentLinks
from perdure.backends.kubernetes import pods as pd
from perdure.backends.kubernetes.api import Api, KubeError
from perdure.backends.kubernetes.watch import Watch
from perdure.core.events import Command, LaunchFailed, Observation

RELEASE_SECONDS = 5.0  # a pod with no launch this long is deleted
RESTORE_SECONDS = 10.0
LOG_FILE = "kubernetes.log"


class PodStates(AgentLinks):
    """See the module docstring; `KubernetesBackend` holds the state and the launches."""

    api: Api
    dir: str
    _watch: Watch | None
    _agents: dict[tuple[str, str], Agent]
    _pods: dict[str, dict[str, Any]]  # this state dir's pods by name, as last watched
    _nodes: dict[str, dict[str, Any]]
    _seen: set[str]  # pods the watch has shown (one missing from it since is gone)
    _watch_said: dict[str, str]  # the last error of each watch written to the log

    if TYPE_CHECKING:  # KubernetesBackend's, which this half calls
        def _attach(self) -> None: ...

        def _holds_spare(self, alloc: Alloc) -> bool: ...

        def _queued(self, alloc: Alloc, reason: str, out: list[Observation]) -> None: ...

    def _refresh(self, out: list[Observation]) -> None:
        """Take in what the watches saw and act on each pod's and node's state."""
        self._take_events()
        for alloc in [a for a in self._allocs if a.slurm_id and not a.ending]:
            self._pod_state(alloc, self._pods.get(alloc.slurm_id), out)
        for alloc in [a for a in self._allocs if a.slurm_id and not a.ending and a.nodes]:
            node = self._nodes.get(alloc.nodes[0])
            if node is None:
                continue
            if not pd.node_ready(node) and alloc.running:
                self._lose_node(alloc.nodes[0], f"node {alloc.nodes[0]} is NotReady", out)
            elif pd.unschedulable(node) and alloc.running and self._holds_launches(alloc):
                self._notice(alloc, f"node {alloc.nodes[0]} was cordoned", out)

    def _take_events(self) -> None:
        if self._watch is None:
            return
        for kind, error in list(self._watch.errors.items()):  # RBAC, a server away: said once
            if error != self._watch_said.get(kind, ""):
                self._watch_said[kind] = error
                self._log(f"watch of {kind}: {error or 'working again'}")
        while True:
            try:
                kind, what, obj = self._watch.events.get_nowait()
            except queue.Empty:
                return
            store = self._pods if kind == "pods" else self._nodes
            if what == "SYNCED":
                store.clear()
                store.update(obj)
            elif what == "DELETED":
                store.pop(str(obj["metadata"]["name"]), None)
            else:
                store[str(obj["metadata"]["name"])] = obj
            if kind == "pods":
                self._seen.update(self._pods)

    def _holds_launches(self, alloc: Alloc) -> bool:
        return any(t.alloc is alloc for t in self._active.values())

    def _pod_state(self, alloc: Alloc, pod: dict[str, Any] | None,
                   out: list[Observation]) -> None:
        node = alloc.nodes[0] if alloc.nodes else "?"
        if pod is None:
            if alloc.slurm_id in self._seen:  # it was there: deleted at once, or gone
                self._gone_pod(alloc, f"its pod {alloc.slurm_id} was deleted", out)
            return
        if pd.terminating(pod):
            alloc.state = "TERMINATING"
            if pd.graceful(pod) and self._holds_launches(alloc):
                self._notice(alloc, f"pod {alloc.slurm_id} is being deleted (evicted)", out)
            elif not alloc.noticed:
                self._gone_pod(alloc, f"its pod {alloc.slurm_id} was force-deleted", out)
            return
        phase = pd.phase(pod)
        if phase == "Running":
            alloc.state = "RUNNING"
            if not alloc.ran:
                alloc.ran = True
                alloc.agents[node] = time.monotonic()
                self._queued(alloc, "", out)
        elif phase == "Pending":
            broken = pd.config_error(pod)
            if broken:
                self._cannot_start(alloc, broken, out)
                return
            reason = pd.waiting_reason(pod)
            if reason and reason != alloc.told:
                self._queued(alloc, reason, out)
        else:
            self._gone_pod(alloc, f"its pod {alloc.slurm_id} is {phase}", out)

    def _gone_pod(self, alloc: Alloc, why: str, out: list[Observation]) -> None:
        """The pod is gone or going: a notice in force makes it the end of the attempt's hold
        there; otherwise its node is lost for the job."""
        alloc.state = "GONE"
        if alloc.noticed or not alloc.nodes:
            self._ended(alloc, why, out)
            return
        self._lose_node(alloc.nodes[0], f"node {alloc.nodes[0]}: {why}", out)

    def _cannot_start(self, alloc: Alloc, why: str, out: list[Observation]) -> None:
        secret = ("; make the Secret <job name>-credentials with a key per credential "
                  "variable (kubectl create secret generic NAME --from-literal=VAR=...)"
                  if "secret" in why.lower() else "")
        for tracked in [t for t in self._active.values() if t.alloc is alloc]:
            self._active.pop(tracked.launch.launch_id, None)
            out.append(LaunchFailed(tracked.launch.launch_id,
                                    f"Kubernetes cannot start pod {alloc.slurm_id}: {why}"
                                    f"{secret}", time.time(), user_error=True))
        self._delete(alloc, grace=0)

    def _ended(self, alloc: Alloc, why: str, out: list[Observation]) -> None:
        """The pod is gone after its notice: what still ran in it went with it."""
        with contextlib.suppress(ValueError):
            self._allocs.remove(alloc)
        alloc.ending = True
        self._log(f"{alloc.job_id} attempt {alloc.attempt}: {why}")
        for tracked in [t for t in self._active.values() if t.alloc is alloc]:
            self._gone(tracked, why, out)

    def _notice(self, alloc: Alloc, why: str, out: list[Observation]) -> None:
        """An eviction or a drain: the job saves and suspends (its next attempt gets new
        pods)."""
        if alloc.noticed:
            return
        alloc.noticed = True
        self._log(f"{alloc.job_id} attempt {alloc.attempt}: {why}: preempting the job")
        out.append(Command("preempt", alloc.job_id, time.time()))

    def _release(self, now: float) -> None:
        """Delete pods that hold no launch (after RELEASE_SECONDS: a restart's new launches
        come within milliseconds of the old ones' exits; at once when nothing will come back:
        its node was lost, the job was preempted, a later attempt began)."""
        for alloc in list(self._allocs):
            if not alloc.slurm_id:
                continue
            if self._holds_launches(alloc) or self._holds_spare(alloc):
                alloc.idle_since = None
                continue
            if alloc.idle_since is None:
                alloc.idle_since = now
            superseded = any(t.launch.job_id == alloc.job_id
                             and t.launch.env.get("PERDURE_ATTEMPT") != alloc.attempt
                             for t in self._active.values())
            if not alloc.nodes or alloc.noticed or superseded or (
                    now - alloc.idle_since >= RELEASE_SECONDS):
                self._delete(alloc, grace=0 if not alloc.nodes else 1)

    def _delete(self, alloc: Alloc, grace: int) -> None:
        alloc.ending = True
        with contextlib.suppress(ValueError):
            self._allocs.remove(alloc)
        with contextlib.suppress(KubeError):
            self.api.call("DELETE", self.api.ns("pods", alloc.slurm_id),
                          {"gracePeriodSeconds": grace}, ok=(404,))

    def _restore(self, now: float, out: list[Observation]) -> None:
        for name, since in list(self._down.items()):
            node = self._nodes.get(name)
            if node is None:
                continue
            if not pd.node_ready(node) or pd.unschedulable(node):
                self._seen_down.add(name)
            elif name in self._seen_down or now - since > RESTORE_SECONDS:
                del self._down[name]
                out.append(Command("node-back", name, time.time()))

    def _log(self, line: str) -> None:
        """One line of what Kubernetes did to the pods (<state>/kubernetes/kubernetes.log)."""
        import os

        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        with open(os.path.join(self.dir, LOG_FILE), "a") as f:
            f.write(f"{stamp} {line}\n")
