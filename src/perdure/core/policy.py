"""The failure policy: a rule table (first match wins; the spec's rules before the defaults).

No side effects: `classify` turns a failure record into a verdict, `escalate` applies the
restart and retry budgets.
"""

from __future__ import annotations

import re
import signal as _signal
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from perdure.core.events import ErrorInfo
from perdure.core.spec import JobSpec, RuleAction, RuleSpec
from perdure.core.states import ErrorCode


class Action(str, Enum):
    SUCCEED = "succeed"  # the job succeeded; stop the rest
    DONE = "done"  # this replica finished; nothing to do
    SUSPEND = "suspend"  # exited under a preemption notice: no failure
    MOVE = "move"  # exited under a maintenance notice: start it elsewhere, no failure
    RESTART = "restart"  # restart the replica in place
    RETRY = "retry"  # retry the job: a new attempt
    FAIL = "fail"  # fail the job


@dataclass(frozen=True)
class Failure:
    """Why a replica ended: the record every rule matches against."""

    replica: str
    primary: bool
    exit_code: int
    signal: int | None = None
    oom: bool = False
    error: ErrorInfo | None = None
    notice: str | None = None  # "preemption" | "maintenance" when one was sent
    node_lost: str | None = None  # the node's name when the replica's node failed
    local_rank: int | None = None  # which process of a multi-process replica failed first
    stderr_tail: str = ""  # its last stderr lines, clipped: the reason when no exception says


@dataclass(frozen=True)
class Verdict:
    action: Action
    code: ErrorCode | None
    message: str  # the error message a user sees if this ends the job
    reason: str  # why this verdict: which rule matched


# Collective and rendezvous failures seen by survivors when a peer dies: a lost peer, not a bug.
_PEER_TYPES = {"DistBackendError", "DistNetworkError", "DistStoreError"}
_PEER_TEXT = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|gloo|NCCL|"
    r"socket timeout|Socket Timeout|recvBytes|ProcessGroup",
)


# NCCL's failures by kind (torch's texts and NCCL's result names), first match wins.
NCCL_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("NCCL invalid usage", re.compile(r"ncclInvalidUsage|ncclInvalidArgument|invalid usage")),
    ("NCCL collective timeout", re.compile(
        r"Watchdog caught collective operation timeout|collective operation timeout|"
        r"ran for \d+ milliseconds before timing out|NCCL.{0,40}timed? ?out", re.IGNORECASE)),
    ("NCCL CUDA error", re.compile(r"ncclUnhandledCudaError|unhandled cuda error", re.I)),
    ("NCCL communication error", re.compile(
        r"ncclSystemError|ncclRemoteError|unhandled system error|remote process exited|"
        r"NCCL communicator was aborted|NCCL error", re.I)),
    ("NCCL internal error", re.compile(r"ncclInternalError|internal check failed", re.I)),
)


def nccl_kind(error: ErrorInfo | None) -> str | None:
    """Which NCCL failure an error is (a NCCL_KINDS name), or None when it is not NCCL's."""
    if error is None:
        return None
    text = f"{error.type}: {error.message}"
    if "nccl" not in text.lower() and "Watchdog" not in text:
        return None
    return next((kind for kind, pattern in NCCL_KINDS if pattern.search(text)), None)


def _nccl_rule(kind: str) -> Rule:
    action = Action.FAIL if kind == "NCCL invalid usage" else Action.RESTART
    return Rule(kind, lambda f, s: nccl_kind(f.error) == kind, action, ErrorCode.USER_CODE)


def is_peer_error(error: ErrorInfo | None) -> bool:
    """Whether an exception is a collective failing because another replica went away."""
    if error is None:
        return False
    return error.type in _PEER_TYPES or (
        error.type == "RuntimeError" and bool(_PEER_TEXT.search(error.message))
    )


def signal_text(number: int) -> str:
    """A signal's name (SIGKILL), or `signal N` for a number that has none."""
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_exit(f: Failure) -> str:
    """`Replica worker-1 exited with a non-zero status of 1` (+ the signal's name)."""
    who = f.replica if f.local_rank is None else f"{f.replica} (local rank {f.local_rank})"
    text = f"Replica {who} exited with a non-zero status of {f.exit_code}"
    return text + (f" ({signal_text(f.signal)})" if f.signal else "")


# The shell's statuses for a command it could not run: not executable, not found. Nothing a
# restart or a retry changes.
NOT_RUNNABLE = (126, 127)


def _not_runnable(f: Failure) -> bool:
    return f.exit_code in NOT_RUNNABLE and f.signal is None and f.error is None


STDERR_CHARS = 800  # of a failure's stderr lines quoted in its message


def _stderr(f: Failure) -> str:
    tail = f.stderr_tail.strip()
    if len(tail) > STDERR_CHARS:
        tail = "..." + tail[-STDERR_CHARS:]
    return f" Last stderr: {tail}" if tail else ""


def _user_message(f: Failure) -> str:
    if _not_runnable(f):
        what = "not executable" if f.exit_code == 126 else "not found"
        return f"{describe_exit(f)}: a command it runs is {what}.{_stderr(f)}"
    kind = nccl_kind(f.error)
    if f.error is not None and kind is not None:
        return f"{describe_exit(f)}. Termination reason: {kind}: {f.error.summary().rstrip('.')}."
    if f.error is not None:
        return f"{describe_exit(f)}. Termination reason: {f.error.summary().rstrip('.')}."
    if f.node_lost:
        return f"{describe_exit(f)}. Termination reason: node {f.node_lost} was lost."
    return f"{describe_exit(f)}.{_stderr(f)}"


def crash_loop(v: Verdict, f: Failure, repeats: int) -> Verdict:
    """Name a crash loop after its exception: restarts ran out on the same one every time."""
    if f.error is None or repeats < 2 or v.action not in (Action.RETRY, Action.FAIL):
        return v
    message = (f"Replica {f.replica} raised the same exception {repeats} times in a row "
               f"(a crash loop): {f.error.summary().rstrip('.')}.")
    return Verdict(v.action, v.code, message, v.reason)


@dataclass(frozen=True)
class Rule:
    name: str
    matches: Callable[[Failure, JobSpec], bool]
    action: Action
    code: ErrorCode | None


def _transient(f: Failure, spec: JobSpec) -> bool:
    codes = spec.restart.transient_exit_codes
    return f.exit_code in codes or (f.signal is not None and f.signal in codes)


# The status perdure.runtime exits with after an emergency save: "saved, resume me".
EXIT_SUSPENDED = 75

DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("primary exited 0", lambda f, s: f.exit_code == 0 and f.primary, Action.SUCCEED, None),
    Rule("replica exited 0", lambda f, s: f.exit_code == 0, Action.DONE, None),
    Rule("preemption notice", lambda f, s: f.notice == "preemption", Action.SUSPEND, None),
    Rule("maintenance notice", lambda f, s: f.notice == "maintenance", Action.MOVE, None),
    Rule("suspend requested", lambda f, s: f.exit_code == EXIT_SUSPENDED, Action.SUSPEND, None),
    Rule("node lost", lambda f, s: f.node_lost is not None, Action.RESTART, ErrorCode.USER_CODE),
    Rule("out of memory", lambda f, s: f.oom, Action.FAIL, ErrorCode.OUT_OF_MEMORY),
    # before the exit code: NCCL's watchdog aborts (SIGABRT), which is no crash of the script
    *(_nccl_rule(kind) for kind, _ in NCCL_KINDS),
    Rule("command not runnable", lambda f, s: _not_runnable(f), Action.FAIL, ErrorCode.USER_CODE),
    Rule("transient exit code", _transient, Action.RETRY, ErrorCode.USER_CODE),
    Rule("peer lost", lambda f, s: is_peer_error(f.error), Action.RESTART, ErrorCode.USER_CODE),
    Rule("uncaught exception", lambda f, s: f.error is not None, Action.FAIL, ErrorCode.USER_CODE),
    Rule("non-zero exit", lambda f, s: True, Action.RESTART, ErrorCode.USER_CODE),
)

_USER_ACTIONS = {
    RuleAction.RESTART: Action.RESTART,
    RuleAction.RETRY: Action.RETRY,
    RuleAction.FAIL: Action.FAIL,
    RuleAction.IGNORE: Action.DONE,
}


def _spec_rule(i: int, r: RuleSpec) -> Rule:
    def matches(f: Failure, spec: JobSpec) -> bool:
        if f.exit_code == 0:
            return False
        if r.exit_codes is not None and f.exit_code not in r.exit_codes:
            return False
        if r.signals is not None and f.signal not in r.signals:
            return False
        if r.exception is not None and (f.error is None or f.error.type != r.exception):
            return False
        return r.message_contains is None or (
            f.error is not None and r.message_contains in f.error.message
        )

    return Rule(f"spec rule {i + 1}", matches, _USER_ACTIONS[r.action], ErrorCode.USER_CODE)


def rules_for(spec: JobSpec) -> tuple[Rule, ...]:
    """Success and notices first, then the spec's rules, then the defaults."""
    user = tuple(_spec_rule(i, r) for i, r in enumerate(spec.restart.rules))
    return DEFAULT_RULES[:5] + user + DEFAULT_RULES[5:]


def classify(f: Failure, spec: JobSpec) -> Verdict:
    """The first rule that matches the failure decides; the verdict names that rule."""
    for rule in rules_for(spec):
        if rule.matches(f, spec):
            message = ""
            if rule.code is ErrorCode.OUT_OF_MEMORY:
                message = (
                    f"Replica {f.replica} ran out of memory and exited with a non-zero "
                    f"status of {f.exit_code}.{_stderr(f)}"
                )
            elif rule.code is not None:
                message = _user_message(f)
            return Verdict(rule.action, rule.code, message, rule.name)
    raise AssertionError("the last default rule matches everything")  # pragma: no cover


# Job retries by error code; USER_CODE and OUT_OF_MEMORY use the spec's max_job_retries.
RETRY_BUDGETS = {ErrorCode.INTERNAL: 2, ErrorCode.INSUFFICIENT_CAPACITY: 3}


def retry_budget(code: ErrorCode, spec: JobSpec) -> int:
    return RETRY_BUDGETS.get(code, spec.restart.max_job_retries)


def escalate(
    v: Verdict, restarts: int, retries: dict[str, int], spec: JobSpec
) -> tuple[Verdict, str]:
    """Apply the budgets: a restart past max becomes a retry, a retry past max a failure;
    the reason with the counts (`non-zero exit, restart 3 of 5`)."""

    if v.action is Action.RESTART:
        limit = spec.restart.max_replica_restarts
        if restarts < limit:
            return v, f"{v.reason}, restart {restarts + 1} of {limit}"
        v = Verdict(Action.RETRY, v.code, v.message, f"{v.reason}, restarts exhausted ({limit})")
    if v.action is Action.RETRY and v.code is not None:
        limit = retry_budget(v.code, spec)
        spent = retries.get(v.code.value, 0)
        if spent < limit:
            return v, f"{v.reason}, job retry {spent + 1} of {limit}"
        return (
            Verdict(Action.FAIL, v.code, v.message, v.reason),
            f"{v.reason}, job retries exhausted ({limit})",
        )
    return v, v.reason
