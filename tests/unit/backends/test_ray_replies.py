"""A launch actor's answers are read by the question asked, never by the order they come in.

Pure: no Ray. The defect this guards: a replica that ended before its start record was read
had its exit record taken for a start record (`KeyError: 'pid'`, the controller died).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from perdure.backends.base import exit_observation
from perdure.backends.ray.replies import EXIT, STARTED, UnexpectedReply, read
from perdure.core.events import LaunchFailed, ReplicaExited

STATUS = {"pid": 4242, "started_at": 100.0, "supervisor_pid": 4241, "via": "agent"}
EXITED = {"exit_code": 1, "time": 101.0, "signal": None, "error": {"type": "ValueError",
                                                                   "message": "bad"}}


def test_an_exit_before_the_start_was_read_is_an_exit() -> None:
    # started() gave None (the replica ended first, or its wait ran out): the exit comes next
    first = read(STARTED, False, None)
    assert first.ask == EXIT and first.started is None and first.exited is None
    news = read(EXIT, False, EXITED)  # was: taken for a start record -> KeyError 'pid'
    assert news.exited == EXITED and news.started is None and news.ask is None


def test_a_start_then_an_exit() -> None:
    news = read(STARTED, False, STATUS)
    assert news.started == (4242, 100.0, STATUS) and news.ask == EXIT
    assert read(EXIT, True, None).ask == EXIT  # still running: keep asking for its end
    assert read(EXIT, True, EXITED).exited == EXITED


def test_a_slow_start_is_asked_for_again() -> None:
    # a loaded machine: started() ran out, exit_record() ran out; the start is still news
    assert read(EXIT, False, None).ask == STARTED
    assert read(STARTED, False, STATUS).started is not None


def test_a_never_started_launch_says_why() -> None:
    never = {"spawn_error": "the supervisor exited without recording", "time": 5.0}
    assert read(EXIT, False, never).exited == never
    failed = exit_observation("j-1.1.w-0.x", never, None)
    assert isinstance(failed, LaunchFailed) and "supervisor exited" in failed.message


def test_a_launch_held_by_a_failed_node_check_says_why_then_waits_for_its_stop() -> None:
    news = read(STARTED, False, {"check_failed": "`check` exited 1: FAIL gpu 0"})
    assert news.check_failed == "`check` exited 1: FAIL gpu 0" and news.ask == EXIT
    assert news.started is None and news.exited is None
    stopped = {"exit_code": 143, "signal": 15, "time": 7.0, "unstarted": "stopped (moved)"}
    assert read(EXIT, False, stopped).exited == stopped


def test_a_status_repeated_after_the_start_reports_nothing_new() -> None:
    news = read(EXIT, True, STATUS)
    assert news.started is None and news.exited is None and news.ask == EXIT


@pytest.mark.parametrize("answer", [
    {"pid": "4242", "started_at": 1.0},  # a pid that is not a number
    {"pid": 4242},  # no start time
    {"exit_code": "1", "time": 1.0},  # an exit code that is not a number
    {"exit_code": 1, "time": float("nan")},
    {"unrelated": True},
    ["pid", 1],
    "started",
    7,
])
def test_an_answer_that_is_no_record_is_unexpected(answer: object) -> None:
    for asked, started in ((STARTED, False), (EXIT, False), (EXIT, True)):
        with pytest.raises(UnexpectedReply):
            read(asked, started, answer)


def test_an_exit_record_becomes_the_core_observation() -> None:
    obs = exit_observation("j-1.1.w-0.x", {**EXITED, "signal": "KILL", "peak_rss_mb": "x"},
                           {"type": "RuntimeError", "message": "from the relay"})
    assert isinstance(obs, ReplicaExited) and obs.exit_code == 1 and obs.signal is None
    assert obs.error is not None and obs.error.message == "from the relay"
    assert obs.peak_rss_mb is None


def test_reading_answers_needs_no_ray() -> None:
    code = "import sys, perdure.backends.ray.replies; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
