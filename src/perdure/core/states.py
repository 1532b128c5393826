"""Job and replica lifecycles: one enum each, every member carrying its facts.

Job states and transitions:

    QUEUED     -> PENDING (admitted: quota and capacity found) | CANCELLED | FAILED
                  (INSUFFICIENT_CAPACITY once its retries run out)
    PENDING    -> RUNNING (every replica started) | PENDING (a restart round) | QUEUED (job
                  retry) | SUSPENDING | CANCELLING | SUCCEEDED | FAILED
    RUNNING    -> PENDING (restart round: replicas starting again) | QUEUED (job retry)
                  | SUSPENDING | CANCELLING | SUCCEEDED | FAILED
    SUSPENDING -> SUSPENDED (every replica down) | FAILED | CANCELLING
    SUSPENDED  -> QUEUED (requeued: automatically, or by `perdure resume` when held)
                  | CANCELLED
    CANCELLING -> CANCELLED (every replica down)
    SUCCEEDED, FAILED, CANCELLED: terminal.

Replica states:

    WAITING  -> STARTING (launch sent) ; STARTING -> RUNNING (process up)
    STARTING | RUNNING -> STOPPING (stop sent) | EXITED (process ended)
    STOPPING -> EXITED ; EXITED -> STARTING (restart, move, new round or attempt)
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
        # identity, not `in (...)`: a str enum's == compares the strings (a big job's ticks
        # ask this of every replica)
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
