"""One replica of a job, and the replicas a spec makes. Plain data, JSON round-trippable."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from perdure.core.spec import JobSpec
from perdure.core.states import ReplicaState


@dataclass
class Replica:
    """One replica of a job; keeps its identity (name, rank) across restarts and moves."""

    name: str  # <pool>-<index>
    pool: str
    index: int
    rank: int
    slots: int
    state: ReplicaState = ReplicaState.WAITING
    node: str | None = None
    gpus: int = 0  # GPUs it needs, on one node
    devices: list[int] = field(default_factory=list)  # its node's GPUs (indices) while placed
    restarts: int = 0  # in the current attempt
    restarts_before: int = 0  # in the attempts before this one (and before a suspension)
    launches: int = 0  # all launches so far: makes launch ids unique
    launch_id: str | None = None
    pid: int | None = None  # its process (local rank 0's) as its backend reported it started
    exit_code: int | None = None
    relaunch: bool = False  # STOPPING only to be started again (new round, move)
    notice: str | None = None  # "preemption" | "maintenance" while a notice is out
    last_reason: str = ""  # never set: kept for the stored rows' field list
    # the exception of its last failure and how many failures in a row had it (a crash loop)
    error_seen: str = ""
    error_repeats: int = 0

    @property
    def alive(self) -> bool:
        return self.state.alive

    @property
    def total_restarts(self) -> int:
        """Restarts over the job's whole life, every attempt."""
        return self.restarts_before + self.restarts

    def to_json(self) -> dict[str, Any]:
        return {**{f: getattr(self, f) for f in _REPLICA_FIELDS}, "state": self.state.value,
                "devices": list(self.devices)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Replica:
        return cls(**{**d, "state": ReplicaState(d["state"])})


_REPLICA_FIELDS = tuple(f.name for f in dataclasses.fields(Replica) if f.name != "state")


def make_replicas(spec: JobSpec) -> list[Replica]:
    """The replicas of a spec in rank order; the first pool's replica 0 is the primary."""
    out: list[Replica] = []
    for pool in spec.pools:
        for i in range(pool.replicas):
            out.append(
                Replica(name=f"{pool.name}-{i}", pool=pool.name, index=i, rank=len(out),
                        slots=pool.slots, gpus=pool.gpus)
            )
    return out
