"""The Slurm backend's inspector: logs and launch records from this login node's copy.

The backend copies every launch's logs and records into the state dir where the local backend
keeps them, so `perdure logs` and `describe` read a Slurm job as a local one. Signals go to
the replica's node through its agent, which only the controller is connected to.
"""

from __future__ import annotations

from perdure.backends.node.inspector import LocalInspector


class SlurmInspector(LocalInspector):
    def pool_summary(self) -> str | None:
        return None  # each node agent has its own pool, on its node

    def signal(self, launch_id: str, sig: int) -> int:
        raise ProcessLookupError(
            f"launch {launch_id}: signals to replicas on Slurm nodes go through the "
            "controller's node agents, not from here; use `perdure preempt`, `perdure cancel`,"
            " or scancel --signal on the allocation")
