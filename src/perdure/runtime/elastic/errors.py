"""Tell a lost peer from a bug: the one exception type elastic code catches, and its classifier.

No side effects. With gloo, the next collective in a survivor fails with a plain RuntimeError
(`Connection reset by peer`, `Connection closed by peer`) within ~50 ms of a peer's death, and a
hung peer shows up as `Timed out waiting ...` at the collective timeout. `is_membership_error`
recognises those (anywhere in the exception's `__cause__` chain), and `MembershipError` is
what perdure raises itself when the membership changes.
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


# What torch.distributed backends say when a peer is gone or unresponsive. Matched against the
# message (case-insensitive) of every exception in the cause chain. gloo (torch 2.13, measured):
# "Read error ... Connection reset by peer", "Connection closed by peer", "Timed out waiting
# 3000ms for recv operation", "Application timeout caused pair closure"; nccl: abort/watchdog.
_LOST_PEER = re.compile(
    "|".join([
        r"connection (?:reset|closed|refused) by peer",
        r"connection (?:reset|refused)",
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


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__
    return seen


def _is_network_error(exc: BaseException) -> bool:
    try:
        from torch.distributed import DistNetworkError
    except ImportError:  # torch without distributed support
        return False
    return isinstance(exc, DistNetworkError)


def is_membership_error(exc: BaseException) -> bool:
    """True when `exc` means a peer was lost (retry on a new group), False for anything else.

    A `MembershipError`, a `torch.distributed.DistNetworkError`, or a backend error whose message
    says a connection to a peer broke or a collective timed out, anywhere in the chain of
    `__cause__` (`raise ... from`; an error raised while handling one is not followed, so a bug
    in an except block is not mistaken for a lost peer). Everything else (a shape error, an
    OOM, KeyboardInterrupt) is a bug or a stop request and must propagate.
    """
    for e in _chain(exc):
        if isinstance(e, MembershipError) or _is_network_error(e):
            return True
        if isinstance(e, RuntimeError) and _LOST_PEER.search(str(e)):
            return True
    return False
