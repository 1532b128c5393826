"""The pages generated from the pure core: error codes, the job lifecycle, the failure
policy's rule table. No side effects.

What a user should do about each error code and what each default rule matches are written
here, beside the generator; a test fails when a code or a rule has no entry.
"""

from __future__ import annotations

from perdure.core.policy import DEFAULT_RULES, RETRY_BUDGETS, rules_for
from perdure.core.spec import JobSpec
from perdure.core.states import (
    JOB_TRANSITIONS,
    REPLICA_TRANSITIONS,
    ErrorCode,
    JobState,
    NodeState,
    ReplicaState,
)
from perdure.docgen import diagram
from perdure.docgen.text import cell

# ErrorCode -> (what it means, what to do)
ERROR_HELP: dict[ErrorCode, tuple[str, str]] = {
    ErrorCode.USER_CODE: (
        "the training script failed: an uncaught exception, a crash loop, a non-zero exit "
        "past `restart.max_replica_restarts` and `restart.max_job_retries`, a NCCL error",
        "read the error (`perdure describe JOB`: the exception and where it was raised) and "
        "the replica's log (`perdure logs JOB --replica R --stderr`); fix the script, then "
        "submit again: it resumes from the newest checkpoint. For a failure that is not the "
        "script's, add a `restart.rules` entry (`action: restart` or `retry`)"),
    ErrorCode.OUT_OF_MEMORY: (
        "a replica was killed by the kernel for memory (its cgroup's OOM events) or went "
        "over its pool's `memory_mb`",
        "raise the pool's `memory_mb` (and the node's memory), or lower the batch size; "
        "`perdure describe` names the replica and its limit"),
    ErrorCode.INSUFFICIENT_CAPACITY: (
        "the job waited longer than `scheduling.placement_timeout_seconds` for capacity, "
        "and so did each of its 3 job retries",
        "`perdure node ls` shows what is free and what is drained or down; restore nodes, "
        "lower `replicas`/`slots`/`gpus`, or raise the timeout"),
    ErrorCode.INTERNAL: (
        "perdure itself or a backend failed a launch: a reply that is not what the protocol "
        "says, a launch the controller lost",
        "the job's events quote the backend's reply; retried twice before the job fails. "
        "Report it with `perdure describe JOB --json` and the controller's output"),
    ErrorCode.CANCELLED: (
        "the job was cancelled (`perdure cancel`, `POST /jobs/{id}/cancel`, Ctrl-C of "
        "`perdure run`)",
        "nothing: submit it again to resume from its newest checkpoint"),
    ErrorCode.HANG: (
        "no rank advanced for `watchdog.hang_seconds`; every rank's stacks were captured "
        "(`logs/<job>/attempt-N/<replica>.stacks`) and the laggard named",
        "read the stacks file `perdure describe` names; report progress in long phases "
        "(`goodput.step`) or raise `watchdog.hang_seconds`. The group restarts from its "
        "checkpoint (counted as the laggard's restart) before the job fails"),
}

# a default rule's name -> what it matches, in a user's words
RULE_HELP: dict[str, str] = {
    "primary exited 0": "the primary replica (the first pool's replica 0) exits 0: the job "
                        "SUCCEEDED; the others get their pool's `grace`, then are stopped",
    "replica exited 0": "any other replica exits 0: it is shown `finished`",
    "preemption notice": "a replica exits after a preemption notice (`perdure preempt`, a "
                         "node preemption, a Slurm or Ray drain): the job suspends",
    "maintenance notice": "a replica exits after a maintenance notice (`perdure node "
                          "drain`): it starts elsewhere, keeping its identity",
    "command not runnable": "exit status 126 or 127 (the command is not executable or not "
                            "found, as the shell says): the job fails at once, quoting it",
    "suspend requested": "exit status 75 (`ctx.exit_suspended()`: saved, resume me)",
    "node lost": "the replica's node failed (or its Ray node died, its Slurm node was "
                 "lost): it restarts elsewhere, no restart counted",
    "out of memory": "killed by the kernel for memory (its cgroup's OOM events), or over "
                     "`memory_mb`",
    "NCCL invalid usage": "NCCL says `ncclInvalidUsage` / `ncclInvalidArgument` (e.g. two "
                          "ranks on one GPU): the script's bug",
    "NCCL collective timeout": "NCCL's watchdog: `Watchdog caught collective operation "
                               "timeout` (a peer hung or died)",
    "NCCL CUDA error": "`ncclUnhandledCudaError`, `unhandled cuda error`",
    "NCCL communication error": "`ncclSystemError`, `ncclRemoteError`, a communicator "
                                "aborted",
    "NCCL internal error": "`ncclInternalError`",
    "transient exit code": "an exit code or signal in `restart.transient_exit_codes` "
                           "(default 6, 134, 11, 139)",
    "peer lost": "a collective failed because another replica went away (gloo/NCCL "
                 "connection errors)",
    "uncaught exception": "an uncaught exception (the error file, else the traceback at "
                          "the end of stderr)",
    "non-zero exit": "any other non-zero exit or signal",
}


def errors() -> str:
    rows = ["| code | what happened | what to do |", "| --- | --- | --- |"]
    for code in ErrorCode:
        what, todo = ERROR_HELP.get(code, ("(undocumented)", "(undocumented)"))
        rows.append(f"| `{code.value}` | {cell(what)} | {cell(todo)} |")
    return "\n".join(rows)


def lifecycle() -> str:
    out = [diagram.svg(), "",
           "Shaded: the job holds capacity; thick border: terminal. Hover an arrow for when "
           "it is taken.", "", "### Job states", "",
           "| state | terminal | holds capacity | goes to | when |",
           "| --- | --- | --- | --- | --- |"]
    for state in JobState:
        facts = f"{_yes(state.terminal)} | {_yes(state.holds_capacity)}"
        moves = JOB_TRANSITIONS[state]
        if not moves:
            out.append(f"| `{state.value}` | {facts} | (none) | |")
        for i, (to, when) in enumerate(moves):
            first = f"`{state.value}` | {facts}" if i == 0 else " | |"
            out.append(f"| {first} | `{to.value}` | {cell(when)} |")
    out += ["", "### Replica states", "", "| state | process may exist | goes to | when |",
            "| --- | --- | --- | --- |"]
    for r in ReplicaState:
        for i, (after, when) in enumerate(REPLICA_TRANSITIONS[r]):
            first = f"`{r.value}` | {_yes(r.alive)}" if i == 0 else " |"
            out.append(f"| {first} | `{after.value}` | {cell(when)} |")
    out += ["", "### Node states", "", "| state | takes new replicas |", "| --- | --- |"]
    out += [f"| `{n.value}` | {_yes(n.schedulable)} |" for n in NodeState]
    return "\n".join(out)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def failure_policy() -> str:
    minimal = JobSpec.model_validate({
        "name": "doc", "pools": [{"name": "w", "command": ["python", "t.py"]}],
        "restart": {"rules": [{"exit_codes": [42], "action": "fail"}]}})
    order = [r.name for r in rules_for(minimal)]
    out = ["| # | rule | matches | action | error code |", "| --- | --- | --- | --- | --- |"]
    for i, name in enumerate(order, 1):
        if name.startswith("spec rule"):
            out.append(f"| {i} | the spec's `restart.rules`, in order | every condition a "
                       "rule gives holds | the rule's `action` | `USER_CODE` |")
            continue
        rule = next(r for r in DEFAULT_RULES if r.name == name)
        code = f"`{rule.code.value}`" if rule.code else ""
        out.append(f"| {i} | {rule.name} | {cell(RULE_HELP.get(name, '(undocumented)'))} | "
                   f"{rule.action.value} | {code} |")
    out += ["", "Job retries a failure may spend, by error code (others: the spec's "
            "`restart.max_job_retries`):", "", "| error code | job retries |", "| --- | --- |"]
    out += [f"| `{code.value}` | {n} |" for code, n in RETRY_BUDGETS.items()]
    return "\n".join(out)
