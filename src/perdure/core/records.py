"""Plain records beside the jobs: the cluster's nodes, and the events of the job log.

No side effects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perdure.core.states import NodeState


@dataclass
class Node:
    name: str
    slots: int
    state: NodeState = NodeState.READY
    gpus: int = 0
    # What CUDA_VISIBLE_DEVICES calls each of the node's GPUs (index i -> gpu_ids[i]); empty:
    # "0".."gpus-1", or (Ray) whatever the node's own scheduler hands out.
    gpu_ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "slots": self.slots, "state": self.state.value,
                "gpus": self.gpus}


@dataclass(frozen=True)
class Event:
    """Something that happened, with its reason; shown by `perdure describe` and `run`."""

    time: float
    job_id: str | None
    kind: str
    message: str
