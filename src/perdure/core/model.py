"""The control plane's state: jobs, their replicas, nodes. Plain data, JSON round-trippable.

No side effects. `decide` never mutates a Job it was given: it works on `clone()`s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from perdure.core.spec import JobSpec
from perdure.core.states import ErrorCode, JobState, NodeState, ReplicaState


@dataclass(frozen=True)
class JobError:
    code: ErrorCode
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code.value, "message": self.message}


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
    restarts: int = 0  # in the current attempt
    launches: int = 0  # all launches so far: makes launch ids unique
    launch_id: str | None = None
    exit_code: int | None = None
    relaunch: bool = False  # STOPPING only to be started again (new round, move)
    avoid_node: str | None = None  # a move: place anywhere but here
    notice: str | None = None  # "preemption" | "maintenance" while a notice is out
    last_reason: str = ""

    @property
    def alive(self) -> bool:
        return self.state.alive


@dataclass
class Job:
    """A submitted job and where it stands. `spec_dir` anchors relative paths of the spec."""

    id: str
    spec: JobSpec
    spec_dir: str
    created: float
    state: JobState = JobState.QUEUED
    attempt: int = 0
    round: int = 0  # rendezvous round within the attempt
    master_port: int | None = None
    replicas: list[Replica] = field(default_factory=list)
    retries: dict[str, int] = field(default_factory=dict)  # spent job retries by error code
    error: JobError | None = None
    # What the job becomes once every replica is down: SUCCEEDED, FAILED, CANCELLED,
    # SUSPENDED or QUEUED (a retry). None while nothing is ending.
    after_stop: JobState | None = None
    waiting_since: float | None = None  # waiting for capacity larger than the healthy total
    wait_reason: str = ""
    hold: bool = False  # suspended until `perdure resume`
    updated: float = 0.0
    step: int | None = None  # latest training step reported by the runtime

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def slots(self) -> int:
        return self.spec.total_slots

    @property
    def primary(self) -> Replica:
        return self.replicas[0]

    def clone(self) -> Job:
        return dataclasses.replace(
            self,
            replicas=[dataclasses.replace(r) for r in self.replicas],
            retries=dict(self.retries),
        )

    def replica_by_launch(self, launch_id: str) -> Replica | None:
        for r in self.replicas:
            if r.launch_id == launch_id:
                return r
        return None

    def alive_replicas(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive]

    def used_slots(self) -> dict[str, int]:
        """Slots held on each node by replicas that may still have a process."""
        used: dict[str, int] = {}
        for r in self.replicas:
            if r.node is not None and (r.alive or (r.relaunch and self.state.holds_capacity)):
                used[r.node] = used.get(r.node, 0) + r.slots
        return used

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["spec"] = self.spec.model_dump(mode="json")
        d["state"] = self.state.value
        d["after_stop"] = self.after_stop.value if self.after_stop else None
        d["error"] = self.error.to_json() if self.error else None
        for r in d["replicas"]:
            r["state"] = r["state"].value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Job:
        d = dict(d)
        d["spec"] = JobSpec.model_validate(d["spec"])
        d["state"] = JobState(d["state"])
        d["after_stop"] = JobState(d["after_stop"]) if d.get("after_stop") else None
        err = d.get("error")
        d["error"] = JobError(ErrorCode(err["code"]), err["message"]) if err else None
        d["replicas"] = [
            Replica(**{**r, "state": ReplicaState(r["state"])}) for r in d["replicas"]
        ]
        return cls(**d)


@dataclass
class Node:
    name: str
    slots: int
    state: NodeState = NodeState.READY

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "slots": self.slots, "state": self.state.value}


def make_replicas(spec: JobSpec) -> list[Replica]:
    """The replicas of a spec in rank order; the first pool's replica 0 is the primary."""
    out: list[Replica] = []
    for pool in spec.pools:
        for i in range(pool.replicas):
            out.append(
                Replica(name=f"{pool.name}-{i}", pool=pool.name, index=i, rank=len(out),
                        slots=pool.slots)
            )
    return out


@dataclass(frozen=True)
class Event:
    """Something that happened, with its reason; shown by `perdure describe` and `run`."""

    time: float
    job_id: str | None
    kind: str
    message: str
