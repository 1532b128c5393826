"""Quota queues and node maintenance on real processes, driven through the CLI."""

from __future__ import annotations

from tests.helpers.harness import Perdure

SLEEPER = ["python", "-c", "import time; time.sleep(600)"]


def state_times(d: dict, prefix: str) -> list[float]:
    return [e["time"] for e in d["events"] if e["message"].startswith(prefix)]


def test_second_job_waits_in_queue_until_the_first_ends(perdure: Perdure) -> None:
    cluster = perdure.cluster({"a": 4, "b": 4}, quota=4)
    short = ["python", "-c", "import time; time.sleep(2)"]
    first = perdure.cli("submit", str(perdure.spec("first", 3, short)), "--cluster",
                        str(cluster)).stdout.strip()
    second = perdure.cli("submit", str(perdure.spec("second", 3, short)), "--cluster",
                         str(cluster)).stdout.strip()
    ctl = perdure.cli("controller", "--exit-when-idle", "--cluster", str(cluster), timeout=120)
    assert ctl.returncode == 0
    a, b = perdure.describe(first), perdure.describe(second)
    assert a["state"] == b["state"] == "SUCCEEDED"
    assert any("waiting for quota: queue default has 1 free slots of 4, need 3" in e["message"]
               for e in b["events"])
    assert state_times(b, "PENDING")[0] >= state_times(a, "SUCCEEDED")[0]


def test_drain_moves_replica_keeping_identity_without_restart(perdure: Perdure) -> None:
    cluster = perdure.cluster({"a": 2, "b": 2})
    job = perdure.cli("submit", str(perdure.spec("drain", 2, SLEEPER)), "--cluster",
                      str(cluster)).stdout.strip()
    ctl = perdure.popen("controller", "--cluster", str(cluster))
    try:
        d = perdure.wait(job, lambda d: d["state"] == "RUNNING")
        node = d["replicas"][0]["node"]
        other = "b" if node == "a" else "a"
        perdure.cli("node", "drain", node)
        d = perdure.wait(job, lambda d: d["state"] == "RUNNING"
                         and all(r["node"] == other for r in d["replicas"]), timeout=60)
        assert [r["name"] for r in d["replicas"]] == ["worker-0", "worker-1"]
        assert [r["rank"] for r in d["replicas"]] == [0, 1]
        assert all(r["restarts"] == 0 for r in d["replicas"])
        assert any("maintenance, no restart" in e["message"] for e in d["events"])
        assert f"{node}" in perdure.cli("node", "ls").stdout
        assert "DRAINED" in perdure.cli("node", "ls").stdout
        perdure.cli("cancel", job)
        perdure.wait(job, lambda d: d["state"] == "CANCELLED", timeout=30)
    finally:
        ctl.kill()
        ctl.wait()


def test_node_failure_restarts_replicas_elsewhere(perdure: Perdure) -> None:
    cluster = perdure.cluster({"a": 2, "b": 2})
    job = perdure.cli("submit", str(perdure.spec("nodefail", 1, SLEEPER)), "--cluster",
                      str(cluster)).stdout.strip()
    ctl = perdure.popen("controller", "--cluster", str(cluster))
    try:
        d = perdure.wait(job, lambda d: d["state"] == "RUNNING")
        node = d["replicas"][0]["node"]
        perdure.cli("chaos", "fail-node", node)
        d = perdure.wait(job, lambda d: d["state"] == "RUNNING"
                         and d["replicas"][0]["node"] not in (node, None), timeout=60)
        assert d["replicas"][0]["restarts"] == 0  # a lost node spends no restart
        assert any(f"node {node} was lost" in e["message"] or "node lost" in e["message"]
                   for e in d["events"])
        perdure.cli("cancel", job)
        perdure.wait(job, lambda d: d["state"] == "CANCELLED", timeout=30)
    finally:
        ctl.kill()
        ctl.wait()
