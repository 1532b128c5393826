"""What Kubernetes does to the agent pods and their nodes, as perdure's observations. Per pod:

| the API server says                                   | perdure does                          |
| ----------------------------------------------------- | ------------------------------------- |
| Pending (unschedulable, gated by Kueue, pulling)      | its launches QUEUED with the reason   |
| Pending and never startable (Secret or image missing) | its launches fail with the reason     |
| Running                                               | its agent's launches are dispatched   |
| deleted with grace (eviction, drain), node cordoned   | `preempt` the job: save, SUSPENDED    |
| gone, force-deleted, Failed; its node NotReady        | `fail-node`: its replicas move        |

Side effects: pod deletions, through the links: messages to agents, the mirror files.
"""

from __future__ import annotations

import contextlib
import queue
import time
from typing import Any

from perdure.backends.agents.alloc import Alloc
from perdure.backends.agents.links import AgentLinks
from perdure.backends.kubernetes import pods as pd
from perdure.backends.kubernetes.api import Api, KubeError
from perdure.backends.kubernetes.watch import Watch
from perdure.core.events import LaunchFailed, Observation

RESTORE_SECONDS = 10.0


class PodStates:

    def __init__(self, api: Api, links: AgentLinks) -> None:
        self.api = api
        self.links = links
        self.watch: Watch | None = None  # started once the backend attaches
        self._pods: dict[str, dict[str, Any]] = {}  # pods by name, as last watched
        self._nodes: dict[str, dict[str, Any]] = {}
        self._seen: set[str] = set()  # pods the watch has shown (one missing since is gone)
        self._watch_said: dict[str, str] = {}  # the last error of each watch, as logged

    def adopt_pod(self, pod: dict[str, Any]) -> None:
        """Track a pod a restarted controller found by its label."""
        meta = dict(pod["metadata"])
        notes, labels = dict(meta.get("annotations") or {}), dict(meta.get("labels") or {})
        if pd.terminating(pod) or pd.NODE_ANNOTATION not in notes:
            return
        self._pods[str(meta["name"])] = dict(pod)  # until the watch lists them again
        running = pd.phase(pod) == "Running"
        alloc = Alloc(str(notes[pd.JOB_ANNOTATION]), str(labels.get(pd.ATTEMPT_LABEL)),
                      [str(notes[pd.NODE_ANNOTATION])], slurm_id=str(meta["name"]),
                      state="RUNNING" if running else "PENDING", ran=running)
        # its agent runs on: it connects to the hub again at the recorded address
        alloc.agents = {alloc.nodes[0]: time.monotonic()} if running else {}
        self.links.allocs.append(alloc)
        self._seen.add(alloc.slurm_id)

    def refresh(self, out: list[Observation]) -> None:
        self._take_events()
        live = [a for a in self.links.allocs if a.slurm_id and not a.ending]
        for alloc in live:
            self._pod_state(alloc, self._pods.get(alloc.slurm_id), out)
        for alloc in [a for a in live if not a.ending and a.nodes]:
            node = self._nodes.get(alloc.nodes[0])
            if node is None:
                continue
            if not pd.node_ready(node) and alloc.running:
                self.links.lose_node(alloc.nodes[0], f"node {alloc.nodes[0]} is NotReady", out)
            elif pd.unschedulable(node) and alloc.running and self.links.launches_of(alloc):
                self.links.notice(alloc, f"node {alloc.nodes[0]} was cordoned", out)

    def _take_events(self) -> None:
        if self.watch is None:
            return
        for kind, error in list(self.watch.errors.items()):  # RBAC, a server away: said once
            if error != self._watch_said.get(kind, ""):
                self._watch_said[kind] = error
                self.links.log(f"watch of {kind}: {error or 'working again'}")
        while True:
            try:
                kind, what, obj = self.watch.events.get_nowait()
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

    def _pod_state(self, alloc: Alloc, pod: dict[str, Any] | None,
                   out: list[Observation]) -> None:
        node = alloc.nodes[0] if alloc.nodes else "?"
        if pod is None:
            if alloc.slurm_id in self._seen:  # it was there: deleted at once, or gone
                self._gone_pod(alloc, f"its pod {alloc.slurm_id} was deleted", out)
            return
        if pd.terminating(pod):
            alloc.state = "TERMINATING"
            if pd.graceful(pod) and self.links.launches_of(alloc):
                self.links.notice(alloc, f"pod {alloc.slurm_id} is being deleted (evicted)",
                                  out)
            elif not alloc.noticed:
                self._gone_pod(alloc, f"its pod {alloc.slurm_id} was force-deleted", out)
            return
        phase = pd.phase(pod)
        if phase == "Running":
            alloc.state = "RUNNING"
            if not alloc.ran:
                alloc.ran = True
                alloc.agents[node] = time.monotonic()
                self.links.queued(alloc, "", out)
        elif phase == "Pending":
            broken = pd.config_error(pod)
            if broken:
                self._cannot_start(alloc, broken, out)
                return
            reason = pd.waiting_reason(pod)
            if reason and reason != alloc.told:
                self.links.queued(alloc, reason, out)
        else:
            self._gone_pod(alloc, f"its pod {alloc.slurm_id} is {phase}", out)

    def _gone_pod(self, alloc: Alloc, why: str, out: list[Observation]) -> None:
        """The pod is gone: the end of a noticed pod, else its node is lost."""
        alloc.state = "GONE"
        if alloc.noticed or not alloc.nodes:
            self.links.end(alloc, why, why, out)
            return
        self.links.lose_node(alloc.nodes[0], f"node {alloc.nodes[0]}: {why}", out)

    def _cannot_start(self, alloc: Alloc, why: str, out: list[Observation]) -> None:
        secret = ("; make the Secret <job name>-credentials with a key per credential "
                  "variable (kubectl create secret generic NAME --from-literal=VAR=...)"
                  if "secret" in why.lower() else "")
        for tracked in self.links.launches_of(alloc):
            self.links.active.pop(tracked.launch.launch_id, None)
            out.append(LaunchFailed(tracked.launch.launch_id,
                                    f"Kubernetes cannot start pod {alloc.slurm_id}: {why}"
                                    f"{secret}", time.time(), user_error=True))
        self.delete(alloc, grace=0)

    def delete(self, alloc: Alloc, grace: int) -> None:
        alloc.ending = True
        with contextlib.suppress(ValueError):
            self.links.allocs.remove(alloc)
        with contextlib.suppress(KubeError):
            self.api.call("DELETE", self.api.ns("pods", alloc.slurm_id),
                          {"gracePeriodSeconds": grace}, ok=(404,))

    def restore(self, now: float, out: list[Observation]) -> None:
        usable = {name: pd.node_ready(node) and not pd.unschedulable(node)
                  for name, node in self._nodes.items()}
        self.links.restore(usable, RESTORE_SECONDS, now, out)
