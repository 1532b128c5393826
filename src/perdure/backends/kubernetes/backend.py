"""Run replicas on Kubernetes: an agent pod per node of an attempt, replicas as processes.

As the Slurm backend, with a pod where Slurm has an allocation; what Kubernetes does to the
pods is read from watches (`podstate`). Pods hold no credentials of the spec: a job's
credential variables are read from the Secret `<job name>-credentials`.
"""

from __future__ import annotations

import os
import sys
import time
from urllib.parse import urlparse

from perdure import statedir
from perdure.backends.agents.alloc import Alloc
from perdure.backends.agents.links import AgentBackend, AgentLinks
from perdure.backends.agents.reports import Tracked
from perdure.backends.base import BackendUnavailable, NodeInfo, route_address
from perdure.backends.kubernetes import pods as pd
from perdure.backends.kubernetes.api import Api, KubeError, load_config
from perdure.backends.kubernetes.podstate import PodStates
from perdure.backends.kubernetes.watch import Watch
from perdure.core.clusterspec import ClusterSpec
from perdure.core.events import HoldNodes, Launch, Observation
from perdure.secrecy import is_secret

ADDRESS_ENV = "PERDURE_K8S_ADDRESS"  # the address agent pods reach this controller at
# Directories every node has at the same path (PATH or PATH:ro, ':'-separated), mounted into
# every agent pod, which then runs this controller's interpreter instead of the image's.
HOST_DIRS_ENV = "PERDURE_K8S_HOST_DIRS"
LOG_FILE = "kubernetes.log"  # what Kubernetes did to the pods, in <state>/kubernetes
OWN_ENV = ("PERDURE_",)  # perdure's variables are never credentials read from a Secret


def host_dirs(words: list[str]) -> tuple[str, ...]:
    """The PATH and PATH:ro items of $PERDURE_K8S_HOST_DIRS split at ':' (a `ro` word marks
    the path before it)."""
    out: list[str] = []
    for word in words:
        if word == "ro" and out:
            out[-1] = out[-1].removesuffix(":ro") + ":ro"
        elif word:
            out.append(word)
    return tuple(out)


def credential_names(env: dict[str, str]) -> list[str]:
    """The variables of a launch read from the job's Secret, not sent. No side effects."""
    return sorted(k for k, v in env.items() if is_secret(k, v) and not k.startswith(OWN_ENV))


class KubernetesBackend(AgentBackend):
    WHERE, GONE = "pod", "its pod is gone"

    def __init__(self, state_dir: os.PathLike[str] | str, cluster: ClusterSpec) -> None:
        if cluster.kubernetes is None:
            raise ValueError("kubernetes: `backend: kubernetes` needs a kubernetes section")
        self.k8s = cluster.kubernetes
        self.state_dir = os.path.realpath(state_dir)
        self.dir = os.path.join(self.state_dir, "kubernetes")
        statedir.private_dirs(self.dir)
        self.links = AgentLinks(self.state_dir, os.path.join(self.dir, LOG_FILE), "Kubernetes",
                                "pod")
        self.tag = pd.state_tag(self.state_dir)
        self.api = Api(load_config(self.k8s.kubeconfig, self.k8s.context, self.k8s.namespace,
                                   self.dir))
        try:  # before anything is started: a wrong server or credentials end here, in a line
            self.api.call("GET", self.api.ns("pods"), params={"limit": "1"})
        except KubeError as exc:
            self.api.close()
            raise BackendUnavailable(f"kubernetes: {exc}") from None
        self.pods = PodStates(self.api, self.links)
        self._configured = [NodeInfo(n.name, n.slots, gpus=n.gpus) for n in cluster.nodes]
        self._gpus: dict[str, dict[str, int]] = {}  # pod -> node GPU id -> its position

    # ---- attach -----------------------------------------------------------------------------

    def _attach(self) -> None:
        if self.links.hub is not None:
            return
        server = urlparse(self.api.config.server)  # pods reach this machine on its way there
        host = os.environ.get(ADDRESS_ENV) or route_address(server.hostname or "127.0.0.1",
                                                            server.port or 443)
        self._agent_secret(self.links.start(host, self.dir).secret)
        selector = f"{pd.STATE_LABEL}={self.tag}"
        listed = self.api.call("GET", self.api.ns("pods"), params={"labelSelector": selector})
        for pod in listed.get("items") or []:
            self.pods.adopt_pod(pod)
        self.pods.watch = Watch(self.api, selector)

    def _agent_secret(self, secret: str) -> None:
        import base64

        name = pd.agent_secret_name(self.tag)
        body = {"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "labels": {pd.STATE_LABEL: self.tag}},
                "data": {pd.AGENT_SECRET_KEY: base64.b64encode(secret.encode()).decode()}}
        if self.api.call("POST", self.api.ns("secrets"), body, ok=(409,)) == {}:
            self.api.call("PUT", self.api.ns("secrets", name), body)

    def nodes(self) -> list[NodeInfo]:
        self._attach()
        if self._configured:
            return list(self._configured)
        params = {"labelSelector": ",".join(f"{k}={v}" for k, v in
                                            self.k8s.node_selector.items())}
        found = self.api.call("GET", "/api/v1/nodes", params=params).get("items") or []
        out = []
        for node in sorted(found, key=lambda n: str(n["metadata"]["name"])):
            if pd.unschedulable(node):
                continue
            alloc = (node.get("status") or {}).get("allocatable") or {}
            out.append(NodeInfo(str(node["metadata"]["name"]),
                                max(1, pd.quantity(alloc.get("cpu", "1"))),
                                pd.node_address(node),
                                pd.quantity(alloc.get("nvidia.com/gpu", "0"))))
        return out

    # ---- launch ----------------------------------------------------------------------------

    def _joins(self, launch: Launch, attempt: str) -> Alloc | None:
        return next((a for a in self.links.allocs
                     if (a.job_id, a.attempt) == (launch.job_id, attempt)
                     and not (a.ending or a.noticed) and launch.node in a.nodes), None)

    # ---- observe ----------------------------------------------------------------------------

    def poll(self) -> list[Observation]:
        self._attach()
        out, self.links.pending = self.links.pending, []
        now = time.monotonic()
        self.links.submit(self._make_pod, out)
        self.pods.refresh(out)
        self.links.drain(self.pods.refresh, out)
        self.links.heartbeats(self.pods.refresh, now, out)
        if self.links.lost.nodes:
            self.pods.restore(now, out)
        self._dispatch(out)
        self._release(now)
        return out

    def _make_pod(self, alloc: Alloc, tracked: list[Tracked]) -> str:
        alloc.slurm_id = pd.pod_name(alloc.job_id, alloc.attempt)
        alloc.state = "PENDING"
        try:
            self.api.call("POST", self.api.ns("pods"), pd.manifest(
                self.k8s, self._plan(alloc, [t.launch for t in tracked])))
        except KubeError as err:
            return f"Kubernetes: {err}"
        self.links.log(f"{alloc.job_id} attempt {alloc.attempt}: pod {alloc.slurm_id} "
                       f"made for node {alloc.nodes[0]}")
        return ""

    def _plan(self, alloc: Alloc, launches: list[Launch]) -> pd.PodPlan:
        """What `alloc`'s pod is made with; a spare's is sized as the attempt's largest pod."""
        hub = self.links.hub
        assert hub is not None
        attempt = [t.launch for t in self.links.active.values()
                   if (t.alloc.job_id, t.alloc.attempt) == (alloc.job_id, alloc.attempt)]
        if not launches:
            per_node = {n: [x for x in attempt if x.node == n] for n in {x.node for x in attempt}}
            launches = max(per_node.values(), key=len, default=[])
        env = launches[0].env if launches else {}
        mounts = host_dirs(os.environ.get(HOST_DIRS_ENV, "").split(os.pathsep))
        python = sys.executable if mounts else "python"
        extra = (("PYTHONPATH", os.environ["PYTHONPATH"]),) if (
            mounts and os.environ.get("PYTHONPATH")) else ()
        return pd.PodPlan(
            name=alloc.slurm_id, tag=self.tag, job_id=alloc.job_id, attempt=alloc.attempt,
            node=alloc.nodes[0],
            command=[python, "-m", "perdure.backends.kubernetes.agent", hub.address,
                     alloc.nodes[0], str(self.links.warm[0]), f"{self.links.warm[1]:g}"],
            cpus=max(1, len(launches)), gpus=sum(launch.gpus for launch in launches),
            grace=float(env.get("PERDURE_GRACE_SECONDS", "30")),
            credentials=tuple(credential_names(env)), job_name=env.get("PERDURE_JOB_NAME", ""),
            host_dirs=mounts, env=extra)

    def hold_nodes(self, hold: HoldNodes) -> None:
        """An agent pod on each held spare node, its warm pool filled: no pod to make and
        no scheduling wait when a node is lost."""
        self._attach()
        key = self.links.holds.update(hold)
        for node in hold.nodes:
            if not any((a.job_id, a.attempt) == key and node in a.nodes
                       and not (a.ending or a.noticed) for a in self.links.allocs):
                self.links.allocs.append(Alloc(*key, [node]))

    def _dispatch(self, out: list[Observation]) -> None:
        for tracked, agent, env in self.links.ready():
            hidden = set(credential_names(tracked.launch.env))  # the pod has them
            env = {k: v for k, v in env.items() if k not in hidden}
            if env.get("CUDA_VISIBLE_DEVICES"):
                env["CUDA_VISIBLE_DEVICES"] = pd.pod_gpus(
                    env["CUDA_VISIBLE_DEVICES"],
                    self._gpus.setdefault(tracked.alloc.slurm_id, {}))
            shown = {k: ("<secret>" if k in hidden else v) for k, v in tracked.launch.env.items()}
            self.links.hand(tracked, agent, env, {"env": shown, "pod": tracked.alloc.slurm_id})

    def _give_back(self, alloc: Alloc, grace: int) -> None:
        self.pods.delete(alloc, grace)

    def close(self) -> None:
        super().close()
        if self.pods.watch is not None:
            self.pods.watch.close()
        self.api.close()
