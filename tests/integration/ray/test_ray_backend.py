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
    # worker-3 ran on node b: its lines came from that host, to the controller's machine
    out = p.cli("logs", "onray", "--replica", "worker-3", "--attempt", "1", "--stdout").stdout
    assert "done: final weights sha256" in out, out
