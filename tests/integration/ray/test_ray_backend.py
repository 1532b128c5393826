"""The same job spec on a real multi-host Ray cluster (namespace hosts) as on the local backend."""

from __future__ import annotations

import pytest
from raytest import RayPerdure
from tests.helpers.clusterjobs import ddp_spec, describe, final_sha


@pytest.mark.timeout(240)
def test_ddp_example_on_ray_matches_the_local_backend(ray_perdure: RayPerdure,
                                                      local_sha: str) -> None:
    p = ray_perdure
    r = p.cli("run", str(ddp_spec(p, "onray")), "--cluster", str(p.ray_cluster({"a": 2, "b": 2})),
              check=False, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert final_sha(p, "onray") == local_sha
    d = describe(p, "onray")
    assert sorted(x["node"] for x in d["replicas"]) == ["a", "a", "b", "b"]
    assert d["goodput"]["goodput"] is not None  # progress reports came back from the nodes


WHERE = ("import os, psutil, socket; "
         "mine = sorted(a.address for n in psutil.net_if_addrs().values() for a in n "
         "if a.family == socket.AF_INET and a.address != '127.0.0.1'); "
         "print('rank', os.environ['RANK'], 'addresses', *mine); "
         "print('master', os.environ['MASTER_ADDR'], os.environ['MASTER_PORT']); "
         # rank 0's exit 0 ends the job (and stops the others): let them print first
         "import time; time.sleep(4 if os.environ['RANK'] == '0' else 0)")


@pytest.mark.ray_long
def test_logs_of_a_replica_on_node_b_and_master_on_rank_0s_node(ray_perdure: RayPerdure
                                                                ) -> None:
    p = ray_perdure
    spec = p.spec("where", replicas=4, command=["python", "-c", WHERE])
    r = p.cli("run", str(spec), "--cluster", str(p.ray_cluster({"a": 2, "b": 2})), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    d = describe(p, "where")
    assert [x["exit_code"] for x in d["replicas"]] == [0, 0, 0, 0], d["events"]
    assert [x["node"] for x in d["replicas"]] == ["a", "a", "b", "b"]
    out = p.cli("logs", "where", "--replica", "worker-3", "--attempt", "1", "--stdout").stdout
    a, b = p.hosts.hosts["a"].address, p.hosts.hosts["b"].address
    assert f"rank 3 addresses {b}" in out, out  # printed on host b, read on the controller's
    merged = p.cli("logs", "where", "--replica", "worker-3", "--attempt", "1").stdout
    assert f"rank 3 addresses {b}" in merged, merged  # the merged log is mirrored too
    master = [line.split() for line in out.splitlines() if line.startswith("master")]
    assert master and master[0][1] == a and int(master[0][2]) > 0, out  # rank 0's host
