"""Node health on the local backend (issue 38): a node that crashes replicas with SIGSEGV is
quarantined after the cluster file's limit, the job succeeds on the other nodes with the
weights of an uninterrupted run, the quarantine outlives the controller, and a node that
fails its preflight check gets no replica."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.harness import Perdure

SCRIPT = Path(__file__).with_name("plain_job.py")


def cluster(perdure: Perdure, nodes: list[str], **health: Any) -> Path:
    return perdure.write("cluster.yaml", {
        "backend": "local", "nodes": [{"name": n, "slots": 1} for n in nodes],
        "health": {"max_node_failures": 2, "window_seconds": 3600, **health}})


def job(perdure: Perdure, out: Path, name: str = "health", **env: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return perdure.spec(name, 2, ["python", str(SCRIPT)],
                        env={"OMP_NUM_THREADS": "1", "STEPS": "30", "STEP_TIME": "0.02",
                             "OUT": str(out), **env},
                        checkpoint={"dir": str(out / "ckpt"), "every_steps": 4},
                        restart={"max_job_retries": 3})


def sha(out: Path) -> str:
    return str(json.loads((out / "result.json").read_text())["sha256"])


@pytest.mark.timeout(400)
def test_a_node_that_segfaults_replicas_is_quarantined_and_the_job_succeeds(
        perdure: Perdure, tmp_path: Path) -> None:
    clean = Perdure(tmp_path / "clean")
    clean.root.mkdir()
    r = clean.cli("run", str(job(clean, tmp_path / "clean-out")), "--cluster",
                  str(cluster(clean, ["a", "c"])), timeout=180, check=False)
    assert r.returncode == 0, r.stdout + r.stderr

    spec = job(perdure, tmp_path / "out", SEGV_ON_NODE="b")
    nodes = cluster(perdure, ["a", "b", "c"])
    r = perdure.cli("run", str(spec), "--cluster", str(nodes), timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    d = perdure.describe("health")
    assert d["state"] == "SUCCEEDED", r.stdout
    assert sha(tmp_path / "out") == sha(tmp_path / "clean-out")
    assert {x["node"] for x in d["replicas"]} == {"a", "c"}
    listed = perdure.cli("node", "ls").stdout
    b = next(line for line in listed.splitlines() if line.startswith("b "))
    assert "QUARANTINED  2 failures within 3600s: SIGSEGV of worker-" in b, listed
    assert r.stdout.count("node b QUARANTINED") == 1, r.stdout

    # The quarantine is stored: a new controller (this `run`) places nothing on b ...
    quick = perdure.spec("quick", 2, ["python", "-c", "pass"])
    r = perdure.cli("run", str(quick), "--cluster", str(nodes), timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {x["node"] for x in perdure.describe("quick")["replicas"]} == {"a", "c"}
    # ... until it is restored
    perdure.cli("node", "restore", "b")
    r = perdure.cli("run", str(perdure.spec("again", 2, ["python", "-c", "pass"])),
                    "--cluster", str(nodes), timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    listed = perdure.cli("node", "ls").stdout
    assert "QUARANTINED" not in listed, listed


CHECK = """\
import os, sys
if os.environ["PERDURE_NODE"] == "b":
    print("PASS cpu: fine")
    print("FAIL gpu 0 ecc: 3 uncorrected ECC errors since the driver loaded")
    sys.exit(1)
print("PASS all")
"""


def test_a_node_failing_its_preflight_gets_no_replica(perdure: Perdure) -> None:
    check = perdure.write("check.py", CHECK)
    nodes = cluster(perdure, ["a", "b", "c"], preflight=["python", str(check)],
                    timeout_seconds=60)
    spec = perdure.spec("pre", 2, ["python", "-c", "pass"])
    r = perdure.cli("run", str(spec), "--cluster", str(nodes), timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    d = perdure.describe("pre")
    assert {x["node"] for x in d["replicas"]} == {"a", "c"}
    assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
    listed = perdure.cli("node", "ls").stdout
    b = next(line for line in listed.splitlines() if line.startswith("b "))
    assert b.endswith(f"QUARANTINED  health check failed: `python {check}` exited 1: FAIL gpu "
                      "0 ecc: 3 uncorrected ECC errors since the driver loaded"), b
