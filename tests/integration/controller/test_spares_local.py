"""Spare nodes on the local backend: a lost node's replica lands on the held spare at once."""

from __future__ import annotations

from tests.helpers.harness import Perdure

SLEEPER = ["python", "-c", "import time; time.sleep(600)"]


def test_a_lost_node_is_replaced_from_the_spare(perdure: Perdure) -> None:
    cluster = perdure.cluster({"a": 1, "b": 1, "c": 1, "d": 1})
    spec = perdure.spec("spare", 2, SLEEPER, pool={"spares": 1})
    job = perdure.cli("submit", str(spec), "--cluster", str(cluster)).stdout.strip()
    ctl = perdure.popen("controller", "--cluster", str(cluster))
    try:
        d = perdure.wait(job, lambda d: d["state"] == "RUNNING" and d.get("spares"))
        used = {r["node"] for r in d["replicas"]}
        (spare,) = d["spares"]
        assert spare not in used
        lost = d["replicas"][1]["node"]
        perdure.cli("chaos", "fail-node", lost)
        d = perdure.wait(job, lambda d: d["state"] == "RUNNING"
                         and d["replicas"][1]["node"] == spare, timeout=60)
        assert d["replicas"][0]["node"] == next(iter(used - {lost}))  # the survivor stays
        assert all(r["restarts"] == 0 for r in d["replicas"])
        messages = [e["message"] for e in d["events"]]
        assert any(m.startswith(f"spare node {spare} took worker-1") for m in messages)
        free = ({"a", "b", "c", "d"} - used - {spare}).pop()
        d = perdure.wait(job, lambda d: list(d.get("spares") or []) == [free], timeout=30)
        assert "spare" in perdure.cli("describe", job).stdout
        perdure.cli("cancel", job)
        perdure.wait(job, lambda d: d["state"] == "CANCELLED" and not d.get("spares"),
                     timeout=30)
    finally:
        ctl.kill()
        ctl.wait()
