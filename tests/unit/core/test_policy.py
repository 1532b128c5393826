"""Every row of the failure table, and the budgets that escalate a verdict."""

from __future__ import annotations

import pytest

from perdure.core.events import ErrorInfo
from perdure.core.policy import Action, Failure, Verdict, classify, escalate, is_peer_error
from perdure.core.spec import JobSpec, RuleAction, RuleSpec
from perdure.core.states import ErrorCode

SPEC = JobSpec.model_validate(
    {"name": "j", "pools": [{"name": "worker", "replicas": 2, "command": ["x"]}]}
)


def f(**kw: object) -> Failure:
    base: dict[str, object] = {"replica": "worker-1", "primary": False, "exit_code": 1}
    return Failure(**{**base, **kw})  # type: ignore[arg-type]


ROWS = [
    (f(primary=True, exit_code=0), Action.SUCCEED, None),
    (f(exit_code=0), Action.DONE, None),
    (f(exit_code=143, signal=15, notice="preemption"), Action.SUSPEND, None),
    (f(exit_code=143, signal=15, notice="maintenance"), Action.MOVE, None),
    (f(exit_code=75), Action.SUSPEND, None),
    (f(exit_code=137, signal=9, oom=True), Action.FAIL, ErrorCode.OUT_OF_MEMORY),
    (f(exit_code=134, signal=6), Action.RETRY, ErrorCode.USER_CODE),
    (f(exit_code=139, signal=11), Action.RETRY, ErrorCode.USER_CODE),
    (f(exit_code=6), Action.RETRY, ErrorCode.USER_CODE),
    (f(error=ErrorInfo("ValueError", "bad shape")), Action.FAIL, ErrorCode.USER_CODE),
    (f(error=ErrorInfo("RuntimeError", "[gloo] Connection closed by peer [127.0.0.1]:1")),
     Action.RESTART, ErrorCode.USER_CODE),
    (f(error=ErrorInfo("DistBackendError", "NCCL error")), Action.RESTART, ErrorCode.USER_CODE),
    (f(exit_code=137, signal=9, node_lost="b"), Action.RESTART, ErrorCode.USER_CODE),
    (f(exit_code=3), Action.RESTART, ErrorCode.USER_CODE),
    (f(exit_code=137, signal=9), Action.RESTART, ErrorCode.USER_CODE),
]


@pytest.mark.parametrize(("failure", "action", "code"), ROWS)
def test_default_rows(failure: Failure, action: Action, code: ErrorCode | None) -> None:
    v = classify(failure, SPEC)
    assert (v.action, v.code) == (action, code)
    assert v.reason


def test_oom_message_is_the_seed_message() -> None:
    v = classify(f(exit_code=137, signal=9, oom=True), SPEC)
    assert v.message == (
        "Replica worker-1 ran out of memory and exited with a non-zero status of 137."
    )


def test_exception_message_ends_with_termination_reason() -> None:
    v = classify(f(error=ErrorInfo("ValueError", "bad shape")), SPEC)
    assert v.message == (
        "Replica worker-1 exited with a non-zero status of 1. "
        "Termination reason: ValueError: bad shape."
    )


def test_oom_wins_over_transient_and_exception() -> None:
    v = classify(f(exit_code=134, signal=6, oom=True, error=ErrorInfo("E", "m")), SPEC)
    assert v.action is Action.FAIL and v.code is ErrorCode.OUT_OF_MEMORY


def test_spec_rules_come_before_defaults_but_not_before_success() -> None:
    spec = SPEC.model_copy(update={"restart": SPEC.restart.model_copy(update={"rules": [
        RuleSpec(exception="ValueError", action=RuleAction.RESTART),
        RuleSpec(exit_codes=[42], action=RuleAction.FAIL),
    ]})})
    assert classify(f(error=ErrorInfo("ValueError", "x")), spec).action is Action.RESTART
    assert classify(f(exit_code=42), spec).action is Action.FAIL
    assert classify(f(exit_code=0, primary=True), spec).action is Action.SUCCEED
    assert classify(f(exit_code=3), spec).reason == "non-zero exit"


def test_restart_budget_escalates_to_retry_then_fail() -> None:
    v = classify(f(exit_code=3), SPEC)
    kept, why = escalate(v, 2, {}, SPEC)
    assert kept.action is Action.RESTART and why.endswith("restart 3 of 5")
    retry, why = escalate(v, 5, {}, SPEC)
    assert retry.action is Action.RETRY and "job retry 1 of 3" in why
    failed, why = escalate(v, 5, {"USER_CODE": 3}, SPEC)
    assert failed.action is Action.FAIL and "exhausted" in why


def test_retry_budgets_by_code() -> None:
    v = Verdict(Action.RETRY, ErrorCode.INTERNAL, "m", "launch failed")
    assert escalate(v, 0, {"INTERNAL": 1}, SPEC)[0].action is Action.RETRY
    assert escalate(v, 0, {"INTERNAL": 2}, SPEC)[0].action is Action.FAIL


@pytest.mark.parametrize(
    ("error", "peer"),
    [
        (ErrorInfo("RuntimeError", "Connection reset by peer"), True),
        (ErrorInfo("RuntimeError", "shape mismatch"), False),
        (ErrorInfo("ValueError", "gloo"), False),
        (None, False),
    ],
)
def test_peer_errors(error: ErrorInfo | None, peer: bool) -> None:
    assert is_peer_error(error) is peer


def test_runtime_and_core_agree_on_the_suspended_status() -> None:
    from perdure.core.policy import EXIT_SUSPENDED
    from perdure.runtime.context import EXIT_SUSPENDED as RUNTIME_EXIT_SUSPENDED

    assert EXIT_SUSPENDED == RUNTIME_EXIT_SUSPENDED
