"""`backend: kubernetes` on the real test cluster: the DDP example on two worker hosts, a
killed rank restarted in its pod, as a user drives it from this machine."""

from __future__ import annotations

import time

import pytest
from tests.helpers.clusterjobs import describe, wait_state, wait_step
from tests.helpers.stopping import stop_controller

from conftest import K8sPerdure, ddp_spec, final_sha

TWO = {"a": 2, "b": 2}


def uids(p: K8sPerdure) -> dict[str, str]:
    return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in p.pods()
            if not pod["metadata"].get("deletionTimestamp")}


@pytest.mark.k8s_long
@pytest.mark.timeout(600)
def test_ddp_on_two_hosts_ends_with_the_local_backends_weights(
        k8s_perdure: K8sPerdure, local_sha: str) -> None:
    p = k8s_perdure
    r = p.cli("run", str(ddp_spec(p, "plain")), "--cluster", str(p.k8s_cluster(TWO)),
              check=False, timeout=420)
    assert "SUCCEEDED" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    d = describe(p, "plain")
    assert sorted(x["node"] for x in d["replicas"]) == ["a", "a", "b", "b"], d["replicas"]
    assert final_sha(p, "plain") == local_sha
    on_b = next(x["name"] for x in d["replicas"] if x["node"] == "b")
    out = p.cli("logs", "plain", "--replica", on_b, "--stdout").stdout
    assert "step " in out, out[-2000:]  # a log from host b, pushed by its agent
