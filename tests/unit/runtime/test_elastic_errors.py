"""Which errors mean "a peer was lost" (rebuild and retry) and which are bugs (propagate)."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from perdure.runtime.elastic import MembershipChanged, MembershipError, is_membership_error

# Messages as gloo raised them on torch 2.13 (measured: see MACHINE-NOTES.md).
GLOO_RESET = ("[third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:41626: "
              "Connection reset by peer. This is typically caused by a remote worker hanging")
GLOO_CLOSED = ("[third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
               "[127.0.0.1]:47540. This is typically caused by a remote worker crashing.")
GLOO_TIMEOUT = ("[third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
                "3000ms for recv operation to complete")


@pytest.mark.parametrize("exc", [
    RuntimeError(GLOO_RESET),
    RuntimeError(GLOO_CLOSED),
    RuntimeError(GLOO_TIMEOUT),
    RuntimeError("Application timeout caused pair closure"),
    MembershipError("worker-2 left"),
    MembershipChanged("round 3"),
    dist.DistNetworkError("failed to connect"),
], ids=["reset", "closed", "timeout", "pair-closure", "membership", "changed", "network"])
def test_lost_peers_are_membership_errors(exc: BaseException) -> None:
    assert is_membership_error(exc)


@pytest.mark.parametrize("exc", [
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x16 and 32x1)"),
    ValueError("Connection reset by peer"),  # not a backend error type
    RuntimeError("CUDA out of memory"),
    KeyboardInterrupt(),
    TimeoutError("no round"),
], ids=["shape", "value-error", "oom", "interrupt", "timeout-error"])
def test_bugs_and_stops_are_not(exc: BaseException) -> None:
    assert not is_membership_error(exc)


def test_a_wrapped_loss_is_found_through_the_cause_chain() -> None:
    try:
        try:
            raise RuntimeError(GLOO_RESET)
        except RuntimeError as inner:
            raise ValueError("step 31 failed") from inner
    except ValueError as outer:
        assert is_membership_error(outer)


def test_a_bug_raised_while_handling_a_loss_is_a_bug() -> None:
    try:
        try:
            raise RuntimeError(GLOO_RESET)
        except RuntimeError:
            raise KeyError("state") from None
    except KeyError as bug:
        assert not is_membership_error(bug)
    try:
        try:
            raise RuntimeError(GLOO_RESET)
        except RuntimeError:
            raise IndexError("oops")  # noqa: B904 - implicit context on purpose
    except IndexError as bug:
        assert not is_membership_error(bug)


def test_membership_error_carries_the_round() -> None:
    assert MembershipError("x", round=4).round == 4
    assert issubclass(MembershipChanged, MembershipError)
