"""Job and replica lifecycles: one enum each, every member carrying its facts.

Job states: QUEUED -> PENDING -> RUNNING -> SUCCEEDED | FAILED, with SUSPENDING -> SUSPENDED
(preemption) and CANCELLING -> CANCELLED beside them. Replica states: WAITING -> STARTING ->
RUNNING -> STOPPING -> EXITED. Every allowed transition is in JOB_TRANSITIONS and
REPLICA_TRANSITIONS below.
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    QUEUED = "QUEUED"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    CANCELLING = "CANCELLING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def holds_capacity(self) -> bool:
        """Whether the job's replicas may occupy slots in this state."""
        return self in _HOLDS


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
_HOLDS = frozenset(
    {JobState.PENDING, JobState.RUNNING, JobState.SUSPENDING, JobState.CANCELLING}
)


class ReplicaState(str, Enum):
    WAITING = "WAITING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    EXITED = "EXITED"

    @property
    def alive(self) -> bool:
        """Whether a process may exist for this replica (the backend must be watched)."""
        # identity, not `in (...)`: a str enum's == compares the strings
        return (self is ReplicaState.STARTING or self is ReplicaState.RUNNING
                or self is ReplicaState.STOPPING)


class NodeState(str, Enum):
    READY = "READY"
    DRAINING = "DRAINING"  # maintenance notice: no new placements, replicas move away
    DRAINED = "DRAINED"
    DOWN = "DOWN"  # failed: replicas on it are lost

    @property
    def schedulable(self) -> bool:
        return self is NodeState.READY


class ErrorCode(str, Enum):
    USER_CODE = "USER_CODE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    INSUFFICIENT_CAPACITY = "INSUFFICIENT_CAPACITY"
    INTERNAL = "INTERNAL"
    CANCELLED = "CANCELLED"
    HANG = "HANG"  # no rank advanced for watchdog.hang_seconds (core/watchdog.py)


# Every allowed transition and when it happens: the docs' lifecycle page is generated from
# these, and every tick of the core's tests is checked against them (tests/helpers/sim.py).
JOB_TRANSITIONS: dict[JobState, tuple[tuple[JobState, str], ...]] = {
    JobState.QUEUED: (
        (JobState.PENDING, "admitted: its queue's quota and the cluster's capacity were found"),
        (JobState.SUSPENDING, "a preemption notice while it waits in a backend's queue"),
        (JobState.SUSPENDED, "held (`perdure preempt --hold`) before it started"),
        (JobState.CANCELLED, "cancelled before it ran"),
        (JobState.FAILED, "INSUFFICIENT_CAPACITY: it waited for capacity past its retries"),
    ),
    JobState.PENDING: (
        (JobState.RUNNING, "every replica started"),
        (JobState.PENDING, "a restart round: replicas start again"),
        (JobState.QUEUED, "a job retry: the attempt ended, a new one waits for admission"),
        (JobState.SUSPENDING, "a preemption notice, or a replica saved and asked to resume"),
        (JobState.CANCELLING, "cancelled: its replicas are being stopped"),
        (JobState.SUCCEEDED, "the primary replica exited 0"),
        (JobState.FAILED, "the failure policy's budgets ran out"),
    ),
    JobState.RUNNING: (
        (JobState.PENDING, "a restart round or an elastic change: replicas start again"),
        (JobState.QUEUED, "a job retry: the attempt ended, a new one waits for admission"),
        (JobState.SUSPENDING, "a preemption notice, or a replica saved and asked to resume"),
        (JobState.CANCELLING, "cancelled: its replicas are being stopped"),
        (JobState.SUCCEEDED, "the primary replica exited 0"),
        (JobState.FAILED, "the failure policy's budgets ran out"),
    ),
    JobState.SUSPENDING: (
        (JobState.SUSPENDED, "every replica is down; its capacity is released"),
        (JobState.FAILED, "a replica failed while the job suspended"),
        (JobState.CANCELLING, "cancelled while it suspended"),
    ),
    JobState.SUSPENDED: (
        (JobState.QUEUED, "requeued: at once, or by `perdure resume` when held"),
        (JobState.CANCELLED, "cancelled while suspended"),
    ),
    JobState.CANCELLING: ((JobState.CANCELLED, "every replica is down"),),
    JobState.SUCCEEDED: (),
    JobState.FAILED: (),
    JobState.CANCELLED: (),
}

REPLICA_TRANSITIONS: dict[ReplicaState, tuple[tuple[ReplicaState, str], ...]] = {
    ReplicaState.WAITING: ((ReplicaState.STARTING, "its launch was sent"),),
    ReplicaState.STARTING: (
        (ReplicaState.RUNNING, "its process is up"),
        (ReplicaState.STOPPING, "a stop was sent"),
        (ReplicaState.EXITED, "its process ended"),
    ),
    ReplicaState.RUNNING: (
        (ReplicaState.STOPPING, "a stop was sent"),
        (ReplicaState.EXITED, "its process ended"),
    ),
    ReplicaState.STOPPING: ((ReplicaState.EXITED, "its process ended"),),
    ReplicaState.EXITED: (
        (ReplicaState.STARTING, "a restart, a move, a new round or a new attempt"),
        (ReplicaState.WAITING, "it waits for a place in the next round or attempt"),
    ),
}
