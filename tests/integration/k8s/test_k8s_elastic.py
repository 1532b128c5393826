"""An elastic job on `backend: kubernetes` whose host dies: it goes on with the survivor (no
restart charged, the survivor's process untouched), as on Slurm."""

from __future__ import annotations

import time

import pytest
from k8stest import K8sPerdure
from tests.helpers.stopping import stop_controller


@pytest.mark.k8s_long
@pytest.mark.timeout(300)
def test_an_elastic_job_shrinks_when_its_host_dies(k8s_perdure: K8sPerdure) -> None:
    p = k8s_perdure
    cluster = str(p.k8s_cluster({"a": 1, "b": 1}))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        spec = p.spec("shrinks", replicas=2, command=["python", "-c", "import time; "
                                                       "time.sleep(600)"],
                      pool={"min_replicas": 1}, elastic={"mode": "resize"})
        p.cli("submit", str(spec), "--cluster", cluster)
        d = p.wait("shrinks", lambda d: d["state"] == "RUNNING", timeout=120)
        on_a = next(x["name"] for x in d["replicas"] if x["node"] == "a")
        killed = time.time()
        p.k8s.kill("b")
        d = p.wait("shrinks", lambda d: bool(d["elastic"]), timeout=30)
        assert "shrink 2 -> 1" in d["elastic"][0]["what"], d["elastic"]
        assert d["elastic"][0]["time"] - killed < 5, "the host's death took too long to notice"
        time.sleep(3)
        d = p.describe("shrinks")
        assert d["state"] == "RUNNING", d["events"]
        survivor = next(x for x in d["replicas"] if x["name"] == on_a)
        assert survivor["state"] == "RUNNING" and survivor["restarts"] == 0, d["replicas"]
        p.cli("cancel", "shrinks")
        d = p.wait("shrinks", lambda d: d["state"] == "CANCELLED", timeout=60)
    finally:
        stop_controller(controller)
