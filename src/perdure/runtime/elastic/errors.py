"""Tell a lost peer from a bug: the one exception type elastic code catches, and its classifier.

No side effects.
"""

from __future__ import annotations

import re

__all__ = [
    "ElasticConfigWarning",
    "MembershipChanged",
    "MembershipError",
    "is_membership_error",
]


class MembershipError(RuntimeError):
    """A peer left the group (died, hung, was removed): `elastic_retry` rebuilds it, re-enters.

    `round`: the round the group was in when the loss was seen (None outside a round).
    """

    def __init__(self, message: str, *, round: int | None = None) -> None:
        super().__init__(message)
        self.round = round


class MembershipChanged(MembershipError):
    """A newer membership round was published: raised by `Manager.maybe_reconfigure()` on every
    rank at the same step boundary, so the group changes between steps, not in one."""


class ElasticConfigWarning(UserWarning):
    """An explicit `elastic_retry` argument disagrees with the job spec's elastic settings."""


# What torch.distributed backends say when a peer is gone or unresponsive (gloo: a reset or
# closed connection, a timed-out recv; nccl: abort or watchdog), matched case-insensitively.
_LOST_PEER = re.compile(
    "|".join([
        r"connection (?:reset|refused)",
        r"connection closed by peer",
        r"broken pipe",
        r"timed out waiting",
        r"application timeout caused pair closure",
        r"socket timeout",
        r"no route to host",
        r"nccl communicator was aborted",
        r"nccl.*watchdog",
        r"process group watchdog",
        r"collective operation timeout",
        r"remote process exited",
    ]),
    re.IGNORECASE,
)


def is_membership_error(exc: BaseException) -> bool:
    """True when `exc` means a peer was lost (retry on a new group), False for anything else.

    A `MembershipError`, a `DistNetworkError`, or a backend error saying a peer's connection
    broke or a collective timed out, anywhere in the `__cause__` chain (not `__context__`: a
    bug in an except block is not a lost peer). Anything else (a shape error, an OOM) must
    propagate.
    """
    import torch.distributed as dist

    network = getattr(dist, "DistNetworkError", MembershipError)  # absent without distributed
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and all(e is not s for s in seen):
        if isinstance(e, (MembershipError, network)):
            return True
        if isinstance(e, RuntimeError) and _LOST_PEER.search(str(e)):
            return True
        seen.append(e)
        e = e.__cause__
    return False
