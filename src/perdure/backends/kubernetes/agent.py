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

import os
import signal
import sys
from typing import Any

from perdure.backends.agents.agent import HubAgent
from perdure.backends.kubernetes.pods import POD_ENV


class PodAgent(HubAgent):
    def __init__(self, hub: str, node: str, warm_pool: str, warm_idle: float) -> None:
        super().__init__(hub, node, warm_pool, warm_idle)
        self.alloc = os.environ.get(POD_ENV, "")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        sys.exit("usage: python -m perdure.backends.kubernetes.agent HUB NODE WARM_POOL "
                 "WARM_IDLE")
    if not os.environ.get(POD_ENV):
        sys.exit(f"${POD_ENV} is not set: this agent runs in a pod perdure made")
    agent = PodAgent(args[0], args[1], args[2], float(args[3]))

    def on_term(signum: int, frame: Any) -> None:
        agent.notice = "preempt"  # the kubelet's notice; the controller decides

    signal.signal(signal.SIGTERM, on_term)
    agent.serve()


if __name__ == "__main__":
    main()
