"""A cordoned node under a running job on `backend: kubernetes` (the first half of `kubectl
drain`): a preemption notice. The job saves and is SUSPENDED; its next attempt's pod for the
cordoned node waits, QUEUED with Kubernetes' reason, until the node is uncordoned; the run
ends bit-identical to an uninterrupted one."""

from __future__ import annotations

import pytest
from k8stest import K8sPerdure, ddp_spec
from tests.helpers.clusterjobs import final_sha, wait_state, wait_step
from tests.helpers.stopping import stop_controller


@pytest.mark.k8s_long
@pytest.mark.timeout(600)
def test_a_cordoned_node_suspends_the_job_which_waits_for_it_then_ends_bit_identical(
        k8s_perdure: K8sPerdure, local_sha: str) -> None:
    p = k8s_perdure
    cluster = str(p.k8s_cluster({"a": 2, "b": 2}))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(ddp_spec(p, "drained", step_time=0.1, grace=20)), "--cluster",
              cluster)
        wait_state(p, "drained", ("RUNNING",), timeout=180)
        wait_step(p, "drained", 15, timeout=180)
        p.k8s.kubectl("cordon", "a")
        d = p.wait("drained", lambda d: d["state"] == "QUEUED" and d["attempt"] > 1
                   and "Unschedulable" in (d.get("queue_reason") or ""), timeout=120)
        assert "Kubernetes: " in d["queue_reason"], d["queue_reason"]
        p.k8s.kubectl("uncordon", "a")
        d = wait_state(p, "drained", ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=400)
        assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-20:])
        messages = [e["message"] for e in d["events"]]
        assert any(m.startswith("SUSPENDED") for m in messages), messages
        assert final_sha(p, "drained") == local_sha
    finally:
        stop_controller(controller)
