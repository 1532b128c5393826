"""The agent pod's command: the node agent (`agents.agent`), speaking for its pod
($PERDURE_K8S_POD) where a Slurm agent speaks for its allocation.
"""

from __future__ import annotations

from perdure.backends.agents import agent
from perdure.backends.kubernetes.pods import POD_ENV


def main(argv: list[str] | None = None) -> None:
    agent.main(argv, "perdure.backends.kubernetes.agent", POD_ENV,
               f"${POD_ENV} is not set: this agent runs in a pod perdure made")


if __name__ == "__main__":
    main()
