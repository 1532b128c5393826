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
    """A peer left the group (died, hung, was removed): the group must be rebuilt.

    `elastic_retry` catches it, waits for the next membership round and re-enters the loop.
    `round` is the round the group was in when the loss was seen (None outside a round).
    """

    def __init__(self, message: str, *, round: int | None = None) -> None:
        super().__init__(message)
        self.round = round


class MembershipChanged(MembershipError):
    """A newer membership round was published (a replica came back, or one was removed).

    Raised by `Manager.maybe_reconfigure()` at a step boundary, on every rank at the same step,
    so the group changes between steps instead of failing in the middle of one.
    """


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

    A `MembershipError`, a `torch.distributed.DistNetworkError`, or a backend error whose message
    says a connection to a peer broke or a collective timed out, anywhere in the chain of
    `__cause__` (`raise ... from`; an error raised while handling one is not followed, so a bug
    in an except block is not mistaken for a lost peer). Everything else (a shape error, an
    OOM, KeyboardInterrupt) is a bug or a stop request and must propagate.
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
