"""The inspector of an agent-based backend: logs and records from the controller's copy;
signals only through the controller's node agents, so the user is told what to use instead.
"""

from __future__ import annotations

from pathlib import Path

from perdure.backends.node.inspector import LocalInspector


class AgentInspector(LocalInspector):
    """`where` the replicas run, and what to use `instead` (factory.AGENT_SIGNALS)."""

    def __init__(self, state_dir: Path | str, where: str, instead: str) -> None:
        super().__init__(state_dir)
        self.where, self.instead = where, instead

    def pool_summary(self) -> str | None:
        return None  # each node agent has its own pool, on its node

    def signal(self, launch_id: str, sig: int) -> int:
        raise ProcessLookupError(
            f"launch {launch_id}: signals to replicas {self.where} go through the "
            "controller's node agents, not from here; use `perdure preempt`, `perdure cancel`"
            f", or {self.instead}")
