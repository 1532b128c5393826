"""perdure's failure policy as a Job's podFailurePolicy plus the JobSet's failurePolicy.

No side effects. Every Job gets `backoffLimit: 0`, so any failed pod fails its Job and JobSet's
failurePolicy decides what happens to the whole set. The podFailurePolicy exists to say *why*
a Job failed: each case perdure tells apart is a `FailJob` rule, and the Job's failure
message names that rule's index ("... matching FailJob rule at index 2"), which the JobSet rule
for the case matches. A failure no rule names (reason `BackoffLimitExceeded`) takes JobSet's
default action, a restart counted against `maxRestarts`: perdure's "restart the group".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perdure.core.policy import EXIT_SUSPENDED
from perdure.core.spec import JobSpec, RuleAction, RuleSpec
from perdure.export.gaps import ExportError, Gap

# JobSet's actions (jobset.x-k8s.io/v1alpha2 FailurePolicyAction).
RESTART = "RestartJobSet"  # recreate every Job; counts against failurePolicy.maxRestarts
RESTART_UNCOUNTED = "RestartJobSetAndIgnoreMaxRestarts"
FAIL = "FailJobSet"

# A spec rule's action on Kubernetes: a replica restart and a job retry both recreate the set.
_RULE_ACTIONS = {RuleAction.FAIL: FAIL, RuleAction.RESTART: RESTART, RuleAction.RETRY: RESTART}

MAX_POD_RULES = 20  # batch/v1 PodFailurePolicy allows at most 20 rules
_SIGNALS = range(1, 65)


@dataclass(frozen=True)
class Case:
    """One failure perdure tells apart: how the pod shows it, and what the JobSet then does."""

    name: str  # the JobSet rule's name; JobSet shows it in the RestartingJobSet reason
    pod_match: dict[str, Any]  # onExitCodes or onPodConditions
    action: str


@dataclass(frozen=True)
class FailureMapping:
    pod_rules: list[dict[str, Any]]  # each Job's podFailurePolicy.rules
    jobset_rules: list[dict[str, Any]]  # the JobSet's failurePolicy.rules
    max_restarts: int
    gaps: list[Gap] = field(default_factory=list)


def exit_codes(codes: list[int]) -> list[int]:
    """The container exit codes in 1..255 (Kubernetes' range; 0 is success) among `codes`."""
    return sorted({c for c in codes if 0 < c <= 255})


def signal_codes(signals: list[int]) -> list[int]:
    """A container killed by signal s exits with 128 + s, as perdure's local backend reports."""
    return sorted({128 + s for s in signals if s in _SIGNALS})


def transient_codes(codes: list[int]) -> list[int]:
    """perdure matches a transient code against the exit status *or* the signal, so 6 (SIGABRT)
    also means exit 134."""
    return sorted(set(exit_codes(codes)) | set(signal_codes(codes)))


def _on_codes(codes: list[int]) -> dict[str, Any]:
    return {"onExitCodes": {"operator": "In", "values": codes}}


def _spec_case(i: int, rule: RuleSpec) -> Case | Gap:
    """A spec rule as a case, or the gap that keeps it out."""
    where = f"restart.rules.{i}"
    if rule.exception is not None or rule.message_contains is not None:
        name = "exception" if rule.exception is not None else "message_contains"
        return Gap(f"{where}.{name}", "Kubernetes sees only a container's exit code, not the "
                   "exception; the rule is left out (a matching exit restarts the JobSet)")
    if rule.action is RuleAction.IGNORE:
        return Gap(f"{where}.action", "`ignore` (the replica is done) cannot be expressed: a Job "
                   "never counts a failed pod as done; the rule is left out")
    # Every condition a rule gives must hold: exit codes and signals intersect.
    codes = exit_codes(rule.exit_codes) if rule.exit_codes is not None else None
    if rule.signals is not None:
        by_signal = signal_codes(rule.signals)
        codes = by_signal if codes is None else sorted(set(codes) & set(by_signal))
    if not codes:
        return Gap(f"{where}.exit_codes", "no exit code a container can show (1..255, or a "
                   "signal 1..64) is left; the rule is left out")
    return Case(f"SpecRule{i + 1}", _on_codes(codes), _RULE_ACTIONS[rule.action])


def cases_for(spec: JobSpec) -> tuple[list[Case], list[Gap]]:
    """The cases in perdure's order: notices first, then the spec's rules, then the defaults."""
    cases = [
        # Preemption, eviction, node drain: the pod carries DisruptionTarget. perdure suspends
        # (or moves) the replica and counts no failure.
        Case("Disrupted", {"onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
             RESTART_UNCOUNTED),
        # The runtime saved an emergency checkpoint and asked to be resumed.
        Case("SuspendRequested", _on_codes([EXIT_SUSPENDED]), RESTART_UNCOUNTED),
    ]
    gaps: list[Gap] = []
    for i, rule in enumerate(spec.restart.rules):
        got = _spec_case(i, rule)
        if isinstance(got, Gap):
            gaps.append(got)
        else:
            cases.append(got)
    transient = transient_codes(spec.restart.transient_exit_codes)
    if transient:
        # perdure retries the job (a new attempt), counted against max_job_retries.
        cases.append(Case("TransientExit", _on_codes(transient), RESTART))
    return cases, gaps


def map_failure_policy(spec: JobSpec) -> FailureMapping:
    """The podFailurePolicy rules every Job gets and the JobSet's failurePolicy for them."""
    cases, gaps = cases_for(spec)
    if len(cases) > MAX_POD_RULES:
        builtin = sum(1 for c in cases if not c.name.startswith("SpecRule"))
        raise ExportError(
            f"restart.rules: a Job's podFailurePolicy holds at most {MAX_POD_RULES} rules, "
            f"{MAX_POD_RULES - builtin} of them for the spec's; it has "
            f"{len(cases) - builtin}: merge rules that share an action"
        )
    pod_rules = [{"action": "FailJob", **c.pod_match} for c in cases]
    jobset_rules = [
        {
            "name": c.name,
            "action": c.action,
            "onJobFailureReasons": ["PodFailurePolicy"],
            # The Job's failure message ends with the index of the pod rule that failed it.
            "onJobFailureMessagePatterns": [f"matching FailJob rule at index {i}$"],
        }
        for i, c in enumerate(cases)
    ]
    return FailureMapping(pod_rules, jobset_rules, spec.restart.max_job_retries, gaps)
