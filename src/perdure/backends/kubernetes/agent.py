"""The node agent of an agent pod: `python -m perdure.backends.kubernetes.agent HUB NODE
WARM_POOL WARM_IDLE`, the container's command.

It is the Slurm backend's node agent (perdure.backends.agents.agent: the local supervisor,
spawner and warm pool; reports, logs and progress pushed to the controller's hub; no shared
filesystem), speaking for its pod ($PERDURE_K8S_POD, from the downward API) where a Slurm
agent speaks for its allocation. The hub's key comes from a Kubernetes Secret
($PERDURE_SLURM_SECRET through secretKeyRef). The kubelet's SIGTERM (an eviction, a drain, a
delete with grace) is reported as a preemption notice, not obeyed: the controller has the
replicas save within the job's grace, which the pod's termination grace exceeds.

Side effects: those of the Slurm node agent; launch directories under this container's
$TMPDIR.
"""

from __future__ import annotations

from perdure.backends.agents import agent
from perdure.backends.kubernetes.pods import POD_ENV


def main(argv: list[str] | None = None) -> None:
    agent.main(argv, "perdure.backends.kubernetes.agent", POD_ENV,
               f"${POD_ENV} is not set: this agent runs in a pod perdure made")


if __name__ == "__main__":
    main()
