"""perdure's elastic runtime: membership changes without restarting, and peer snapshots.

    from perdure.runtime import elastic, Snapshotter

    manager = elastic.Manager()
    snap = Snapshotter()

    @manager.elastic_retry()             # mode and minimum from the job spec
    def train() -> None:
        manager.sync_state(state)        # survivors' state to the new members
        ...                              # re-wrap DDP, re-partition the sampler, train
        manager.maybe_reconfigure()      # at each step boundary: grow back when replicas return

Public names: Manager, RetryLimit, Snapshotter, SnapshotInfo, ElasticEvent, MembershipError,
MembershipChanged, ElasticConfigWarning, is_membership_error, read_round, Round, Member.
Everything else in this package is internal.
"""

from perdure.runtime.elastic.errors import (
    ElasticConfigWarning,
    MembershipChanged,
    MembershipError,
    is_membership_error,
)
from perdure.runtime.elastic.manager import Manager, current_manager
from perdure.runtime.elastic.rendezvous import Member, Round, read_round
from perdure.runtime.elastic.retry import ElasticEvent, RetryDecision, RetryLimit
from perdure.runtime.elastic.snapshot import SnapshotInfo, Snapshotter

__all__ = [
    "ElasticConfigWarning",
    "ElasticEvent",
    "Manager",
    "Member",
    "MembershipChanged",
    "MembershipError",
    "RetryDecision",
    "RetryLimit",
    "Round",
    "SnapshotInfo",
    "Snapshotter",
    "current_manager",
    "is_membership_error",
    "read_round",
]
