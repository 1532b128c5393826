"""Real processes (gloo): below the minimum the survivors wait, then fail with TimeoutError
instead of training on; without a controller a lost peer is one clear error, not a hang."""

from __future__ import annotations

from pathlib import Path

from elastic_harness import Cluster

NODES = {"worker-0": "a", "worker-1": "b"}
ARGS = {"steps": 100_000, "step_time": 0.02, "timeout": 4}


def test_below_the_minimum_the_survivor_waits_then_times_out(tmp_path: Path) -> None:
    c = Cluster(tmp_path, NODES, mode="resize", min_world=2, args=ARGS)
    try:
        c.start()
        c.wait_for("step 10", lambda: c.max_step() >= 10)
        killed_at = c.kill("worker-1")
        c.publish(["worker-0"], "shrink 2 -> 1: worker-1 exited")  # below min_replicas=2
        codes = c.wait_exit(60)
    finally:
        c.stop()
    assert codes["worker-0"] == 3, c.tails()  # the worker's exit status for TimeoutError
    [timeout] = c.records("timeout")
    assert "at least 2 replicas" in timeout["message"] or "could not be formed" in timeout[
        "message"]
    assert 4.0 <= timeout["t"] - killed_at < 15.0
    # it never trained as a group of one
    assert all(r["world"] == 2 for r in c.records("step"))
    assert c.records("event") == []


def test_without_a_controller_a_lost_peer_is_one_clear_error(tmp_path: Path) -> None:
    c = Cluster(tmp_path, NODES, elastic=False, args=ARGS)
    try:
        c.start()
        c.wait_for("step 10", lambda: c.max_step() >= 10)
        killed_at = c.kill("worker-1")
        codes = c.wait_exit(60)
    finally:
        c.stop()
    assert codes["worker-0"] == 4, c.tails()  # the worker's exit status for MembershipError
    [error] = c.records("error")
    assert error["type"] == "MembershipError" and "without a controller" in error["message"]
    assert error["t"] - killed_at < 5.0  # seen at the next collective, not at a timeout
