"""The same job spec on a real multi-host Ray cluster (namespace hosts) as on the local backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import RayPerdure, describe

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ddp_mlp"


def ddp_spec(p: RayPerdure, name: str, epochs: int = 2, step_time: float = 0.02) -> Path:
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["name"] = name
    spec["pools"][0]["command"] = ["python", str(EXAMPLE / "train.py"), "--epochs",
                                   str(epochs), "--step-time", str(step_time)]
    spec["checkpoint"]["dir"] = str(p.root / f"ckpt-{name}")
    return p.write(f"{name}.yaml", spec)


def result(p: RayPerdure, name: str) -> dict:
    return json.loads((p.root / f"ckpt-{name}" / "result.json").read_text())


@pytest.mark.timeout(240)
def test_ddp_example_on_ray_matches_the_local_backend(ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    local = p.write("local.yaml", {"backend": "local",
                                   "nodes": [{"name": "a", "slots": 2}, {"name": "b", "slots": 2}]})
    r = p.cli("run", str(ddp_spec(p, "onlocal")), "--cluster", str(local), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    r = p.cli("run", str(ddp_spec(p, "onray")), "--cluster", str(p.ray_cluster({"a": 2, "b": 2})),
              check=False, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert result(p, "onray")["sha256"] == result(p, "onlocal")["sha256"]
    d = describe(p, "onray")
    assert sorted(x["node"] for x in d["replicas"]) == ["a", "a", "b", "b"]
    assert d["goodput"]["goodput"] is not None  # progress reports came back from the nodes


WHERE = ("import os, psutil, socket; "
         "mine = sorted(a.address for n in psutil.net_if_addrs().values() for a in n "
         "if a.family == socket.AF_INET and a.address != '127.0.0.1'); "
         "print('rank', os.environ['RANK'], 'addresses', *mine); "
         "print('master', os.environ['MASTER_ADDR'], os.environ['MASTER_PORT'])")


def test_logs_of_a_replica_on_node_b_and_master_on_rank_0s_node(ray_perdure: RayPerdure
                                                                ) -> None:
    p = ray_perdure
    spec = p.spec("where", replicas=4, command=["python", "-c", WHERE])
    r = p.cli("run", str(spec), "--cluster", str(p.ray_cluster({"a": 2, "b": 2})), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    d = describe(p, "where")
    assert [x["node"] for x in d["replicas"]] == ["a", "a", "b", "b"]
    out = p.cli("logs", "where", "--replica", "worker-3", "--attempt", "1", "--stdout").stdout
    a, b = p.hosts.hosts["a"].address, p.hosts.hosts["b"].address
    assert f"rank 3 addresses {b}" in out, out  # printed on host b, read on the controller's
    master = [line.split() for line in out.splitlines() if line.startswith("master")]
    assert master and master[0][1] == a and int(master[0][2]) > 0, out  # rank 0's host
