"""A command the shell could not run fails the job at once, in the shell's words; every
failure without an exception ends with the replica's last stderr lines."""

from __future__ import annotations

import pytest
from tests.helpers.sim import Sim, spec

from perdure.backends.fake import FakeRun
from perdure.core.events import ErrorInfo
from perdure.core.policy import Action, Failure, classify, escalate
from perdure.core.states import JobState

NOT_FOUND = "bash: line 1: exec: python: not found"


@pytest.mark.parametrize(("code", "what"), [(127, "not found"), (126, "not executable")])
def test_exit_126_and_127_fail_at_once_with_the_shells_line(code: int, what: str) -> None:
    f = Failure("worker-1", primary=False, exit_code=code, stderr_tail=NOT_FOUND)
    verdict, reason = escalate(classify(f, spec()), 0, {}, spec())
    assert verdict.action is Action.FAIL and reason == "command not runnable"
    assert verdict.message == (f"Replica worker-1 exited with a non-zero status of {code}: a "
                               f"command it runs is {what}. Last stderr: {NOT_FOUND}")


def test_other_failures_without_an_exception_end_with_stderr() -> None:
    f = Failure("worker-0", primary=True, exit_code=3, stderr_tail="disk full | giving up")
    assert classify(f, spec()).message == ("Replica worker-0 exited with a non-zero status of "
                                           "3. Last stderr: disk full | giving up")
    oom = Failure("worker-0", primary=True, exit_code=137, oom=True, stderr_tail="allocating")
    assert classify(oom, spec()).message.endswith("status of 137. Last stderr: allocating")
    raised = Failure("worker-0", primary=True, exit_code=1, stderr_tail="Traceback ...",
                     error=ErrorInfo("ValueError", "bad shape"))
    assert classify(raised, spec()).message.endswith("Termination reason: ValueError: bad "
                                                     "shape.")


def test_a_job_whose_command_is_not_found_is_launched_once() -> None:
    sim = Sim(script=lambda launch: FakeRun(seconds=0.2, exit_code=127))
    job_id = sim.submit(spec())
    job = sim.run_until(job_id, {JobState.FAILED})
    assert job.attempt == 1 and job.replicas[0].launches == 1
    assert job.error is not None and "is not found" in job.error.message


def test_a_spec_rule_still_comes_first() -> None:
    s = spec(restart={"rules": [{"exit_codes": [127], "action": "restart"}]})
    f = Failure("worker-0", primary=True, exit_code=127)
    assert classify(f, s).action is Action.RESTART
