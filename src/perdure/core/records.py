"""Plain records beside the jobs: the cluster's nodes, and the events of the job log.

No side effects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perdure.core.states import NodeState


@dataclass(frozen=True)
class Strike:
    """A failure that pointed at a node (core/health.py); no job or replica: the node's own."""

    time: float
    kind: str  # "SIGSEGV", "NCCL CUDA error", "node lost", "health check", ...
    job: str = ""
    replica: str = ""

    def to_json(self) -> list[Any]:
        return [self.time, self.kind, self.job, self.replica]

    @classmethod
    def from_json(cls, d: list[Any]) -> Strike:
        return cls(float(d[0]), str(d[1]), str(d[2]), str(d[3]))

    def describe(self) -> str:
        whose = f" of {self.replica} ({self.job})" if self.replica else ""
        return f"{self.kind}{whose}"


QUARANTINED = "QUARANTINED"  # what a fenced node shows instead of its state


@dataclass
class Node:
    name: str
    slots: int
    state: NodeState = NodeState.READY
    gpus: int = 0
    gpu_ids: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES's name of each GPU; empty: "0".."N-1"
    # why it is quarantined (core/health.py); a lost node back READY stays fenced
    fence: str = ""
    strikes: tuple[Strike, ...] = ()  # the failures held against it, within the window

    @property
    def schedulable(self) -> bool:
        return self.state.schedulable and not self.fence

    @property
    def shown(self) -> str:
        """The state a person sees: QUARANTINED while fenced, else the lifecycle state."""
        return QUARANTINED if self.fence else self.state.value

    def health_json(self) -> dict[str, Any]:
        return {"fence": self.fence, "strikes": [s.to_json() for s in self.strikes]}

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "slots": self.slots, "state": self.state.value,
                "gpus": self.gpus, **self.health_json()}


@dataclass(frozen=True)
class Event:
    """Something that happened, with its reason; shown by `perdure describe` and `run`."""

    time: float
    job_id: str | None
    kind: str
    message: str
