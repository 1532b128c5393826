"""The exported failure policy decides as perdure's own policy does, failure by failure.

A pod failure is run through the Job controller's podFailurePolicy matching and JobSet's
failurePolicy matching (as their sources define them: first matching rule wins, the Job's
failure message names the rule's index), and the action is compared with `core.policy.classify`
on the same failure.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from perdure.core.policy import Action, Failure, classify
from perdure.core.spec import JobSpec, parse_job_spec
from perdure.export.gaps import ExportError
from perdure.export.k8s_policy import (
    FAIL,
    RESTART,
    RESTART_UNCOUNTED,
    map_failure_policy,
    signal_codes,
    transient_codes,
)

SPECS = Path(__file__).parent / "specs"

# What each perdure verdict is on a JobSet: a suspension or move costs nothing, a replica
# restart and a job retry both recreate the set (counted), a failure fails it.
EXPECTED = {
    Action.SUSPEND: RESTART_UNCOUNTED,
    Action.MOVE: RESTART_UNCOUNTED,
    Action.RESTART: RESTART,
    Action.RETRY: RESTART,
    Action.FAIL: FAIL,
}


def job_failure(
    pod_rules: list[dict[str, Any]], exit_code: int, disrupted: bool
) -> tuple[str, str]:
    """The failed Job's (reason, message), as the Job controller sets them."""
    for i, rule in enumerate(pod_rules):
        codes = rule.get("onExitCodes", {}).get("values", [])
        conditions = rule.get("onPodConditions", [])
        if exit_code in codes:
            return "PodFailurePolicy", (f"Container worker for pod ml/trainer-worker-0-1-x failed "
                                        f"with exit code {exit_code} matching FailJob rule at "
                                        f"index {i}")
        if disrupted and {"type": "DisruptionTarget", "status": "True"} in conditions:
            return "PodFailurePolicy", (f"Pod ml/trainer-worker-0-1-x has condition "
                                        f"DisruptionTarget matching FailJob rule at index {i}")
    return "BackoffLimitExceeded", "Job has reached the specified backoff limit"


def jobset_action(rules: list[dict[str, Any]], reason: str, message: str) -> str:
    """JobSet's first matching rule's action; RestartJobSet when none matches."""
    for rule in rules:
        if reason in rule["onJobFailureReasons"] and any(
            re.search(p, message) for p in rule["onJobFailureMessagePatterns"]
        ):
            return str(rule["action"])
    return RESTART


def k8s_decides(spec: JobSpec, exit_code: int, disrupted: bool = False) -> str:
    mapping = map_failure_policy(spec)
    reason, message = job_failure(mapping.pod_rules, exit_code, disrupted)
    return jobset_action(mapping.jobset_rules, reason, message)


# (exit status, signal, notice): the local backend reports a signal s as status 128 + s.
FAILURES = [
    (75, None, None),  # the runtime saved and asked to be resumed
    (143, 15, "preemption"),  # SIGTERM under a preemption notice
    (75, None, "preemption"),
    (137, 9, "maintenance"),
    (134, 6, None),  # SIGABRT: transient
    (6, None, None),
    (139, 11, None),  # SIGSEGV: transient
    (42, None, None),  # a transient code the spec adds
    (3, None, None),  # spec rule: fail
    (4, None, None),
    (137, 9, None),  # spec rule: SIGKILL -> retry
    (1, None, None),  # any other exit: restart
    (2, None, None),
    (143, 15, None),
    (255, None, None),
]


@pytest.mark.parametrize(("status", "signal", "notice"), FAILURES)
def test_the_jobset_decides_as_perdure_does(status: int, signal: int | None,
                                            notice: str | None) -> None:
    spec = parse_job_spec((SPECS / "two_pools.yaml").read_text())
    verdict = classify(Failure("worker-1", False, status, signal=signal, notice=notice), spec)
    assert k8s_decides(spec, status, disrupted=notice is not None) == EXPECTED[verdict.action], (
        f"exit {status} (notice {notice}): perdure says {verdict.action.value} ({verdict.reason})"
    )


def test_restart_budget_is_max_job_retries() -> None:
    spec = parse_job_spec((SPECS / "two_pools.yaml").read_text())
    assert map_failure_policy(spec).max_restarts == spec.restart.max_job_retries == 5


def test_out_of_memory_is_a_counted_restart_not_a_failure() -> None:
    """A documented difference: Kubernetes shows an OOM kill only as exit 137, like SIGKILL."""
    spec = parse_job_spec("name: x\npools: [{name: w, command: [python]}]\n")
    assert classify(Failure("w-0", False, 137, signal=9, oom=True), spec).action is Action.FAIL
    assert k8s_decides(spec, 137) == RESTART


def test_codes_as_containers_show_them() -> None:
    assert transient_codes([6, 134, 11, 139]) == [6, 11, 134, 139]
    assert transient_codes([0, 42, 300, -1]) == [42, 170]  # 42 is also a signal: 128 + 42
    assert signal_codes([9, 15, 0, 99]) == [137, 143]


@pytest.mark.parametrize(("rule", "values", "gap"), [
    ("{exit_codes: [134], signals: [6], action: fail}", [134], None),  # both must hold
    ("{exit_codes: [1], signals: [9], action: fail}", None, "restart.rules.0.exit_codes"),
    ("{exit_codes: [0, 300], action: fail}", None, "restart.rules.0.exit_codes"),
    ("{exit_codes: [3], action: ignore}", None, "restart.rules.0.action"),
    ("{exception: TimeoutError, action: fail}", None, "restart.rules.0.exception"),
    ("{message_contains: CUDA, exit_codes: [1], action: fail}", None,
     "restart.rules.0.message_contains"),
])
def test_spec_rules_map_or_say_why_not(rule: str, values: list[int] | None,
                                       gap: str | None) -> None:
    spec = parse_job_spec(f"name: x\npools: [{{name: w, command: [python]}}]\n"
                          f"restart: {{rules: [{rule}]}}\n")
    mapping = map_failure_policy(spec)
    names = [r["name"] for r in mapping.jobset_rules]
    if values is None:
        assert "SpecRule1" not in names
        assert [g.field for g in mapping.gaps] == [gap]
    else:
        assert mapping.pod_rules[names.index("SpecRule1")]["onExitCodes"]["values"] == values
        assert mapping.gaps == []


def test_too_many_rules_for_a_pod_failure_policy_is_an_error() -> None:
    rules = ", ".join(f"{{exit_codes: [{i}], action: fail}}" for i in range(1, 19))
    spec = parse_job_spec(f"name: x\npools: [{{name: w, command: [python]}}]\n"
                          f"restart: {{rules: [{rules}]}}\n")
    with pytest.raises(ExportError, match=r"restart.rules: .* at most 20 rules, 17 .* has 18"):
        map_failure_policy(spec)
