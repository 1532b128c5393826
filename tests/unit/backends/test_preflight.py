"""The preflight gate (backends/preflight.py) with real child processes: a node passes once
per attempt, a check past its timeout fails, a command that cannot start fails, and a held
launch can be dropped; an agent's gate runs once per key for all its threads."""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from perdure.backends.preflight import NodeGate, Outcome, Preflight, Verdict, check_env
from perdure.core.events import Launch


def launch(node: str, attempt: int = 1, replica: str = "worker-0") -> Launch:
    return Launch(f"job-1.{attempt}.{replica}.1", "job-1", replica, node, ("true",),
                  {"PERDURE_ATTEMPT": str(attempt)}, "/", None, "/tmp/x")


def settle(p: Preflight, seconds: float = 20.0) -> list[Verdict]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done = p.poll()
        if done:
            return done
        time.sleep(0.02)
    raise AssertionError("no check ended")


def test_a_node_passes_once_per_attempt() -> None:
    p = Preflight(["sh", "-c", 'test "$PERDURE_NODE" = a'], 10)
    first, second = launch("a"), launch("a", replica="worker-1")
    assert not p.admit(first) and not p.admit(second)  # both wait for one check
    (v,) = settle(p)
    assert (v.node, v.passed, v.held) == ("a", True, [first, second])
    assert p.admit(launch("a", replica="worker-2"))  # passed for this attempt
    assert not p.admit(launch("a", attempt=2))  # a new attempt checks again
    assert settle(p)[0].passed


def test_a_failing_check_says_why() -> None:
    p = Preflight(["sh", "-c", "echo PASS cpu; echo FAIL disk state: full; exit 3"], 10)
    held = launch("b")
    assert not p.admit(held)
    (v,) = settle(p)
    assert not v.passed and v.held == [held]
    assert v.message == ("`sh -c echo PASS cpu; echo FAIL disk state: full; exit 3` exited 3: "
                         "FAIL disk state: full")


def test_a_check_past_its_timeout_fails() -> None:
    p = Preflight(["sleep", "30"], 0.3)
    p.admit(launch("c"))
    began = time.monotonic()
    (v,) = settle(p)
    assert not v.passed and v.message == "timed out after 0.3s"
    assert time.monotonic() - began < 10


def test_a_check_that_cannot_start_fails() -> None:
    p = Preflight(["/no/such/check"], 10)
    p.admit(launch("d"))
    (v,) = settle(p)
    assert not v.passed and v.message.startswith("`/no/such/check` exited 127: FAIL preflight "
                                                 "could not start: ")


def test_a_held_launch_can_be_dropped() -> None:
    p = Preflight(["sleep", "30"], 60)
    held = launch("e")
    p.admit(held)
    assert p.drop(held.launch_id) == held
    assert p.drop(held.launch_id) is None
    p.close()


def test_a_node_gate_runs_once_per_key_for_every_thread() -> None:
    """The Ray node agent and the Slurm agent step: callers from several threads wait for
    one run per key; the outcome is kept (a failed one too)."""
    gate = NodeGate(["sh", "-c", 'echo run >> "$RUNS"; sleep 0.3; test "$KEY" = good'], 10)
    with tempfile.TemporaryDirectory() as d:
        runs = os.path.join(d, "runs")
        env = {"RUNS": runs, "KEY": "good"}
        with ThreadPoolExecutor(4) as pool:
            outcomes = list(pool.map(lambda _: gate.outcome("job.1", env, None, 10), range(4)))
        assert outcomes == [Outcome(True, "")] * 4
        bad = gate.outcome("job.2", {**env, "KEY": "bad"}, d, 10)
        assert bad == Outcome(False, "`sh -c echo run >> \"$RUNS\"; sleep 0.3; test \"$KEY\" "
                                     "= good` exited 1")
        assert gate.outcome("job.2", env, d, 0) == bad  # it stands a while: not run again
        with open(runs) as f:
            assert len(f.read().split()) == 2
    assert gate.outcome("job.3", {"RUNS": os.devnull}, None, 0) is None  # running: ask again


def test_a_check_sees_the_job_but_not_its_relay_secret() -> None:
    env = check_env({"PERDURE_JOB_ID": "j", "PERDURE_JOB_SECRET": "s3cret"}, "b")
    assert env == {"PERDURE_JOB_ID": "j", "PERDURE_NODE": "b"}


def test_a_failed_node_check_runs_again_after_a_while() -> None:
    """A node restored after its check failed is checked again by the next launch."""
    gate = NodeGate(["sh", "-c", 'test -e "$OK"'], 10, recheck=0.2)
    with tempfile.TemporaryDirectory() as d:
        ok = os.path.join(d, "ok")
        assert not gate.outcome("job.1", {"OK": ok}, None, 10).passed  # type: ignore[union-attr]
        open(ok, "w").close()  # repaired
        assert not gate.outcome("job.1", {"OK": ok}, None, 10).passed  # type: ignore[union-attr]
        time.sleep(0.3)
        assert gate.outcome("job.1", {"OK": ok}, None, 10) == Outcome(True, "")
