"""What the Ray, Slurm and Kubernetes integration tests share: examples/ddp_mlp as a job spec,
its final weights, and waits on a running job."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import yaml
from tests.helpers.harness import Perdure, kill_leftovers

TESTS = Path(__file__).resolve().parents[1]
EXAMPLE = TESTS.parent / "examples" / "ddp_mlp"
EPOCHS = 4  # of the ddp_mlp runs whose final weights are compared with the local backend's
STEP = re.compile(r"^step (\d+) ", re.M)



def nodes_field(nodes: dict[str, int]) -> list[dict[str, Any]]:
    """A cluster file's `nodes` list from {name: slots}."""
    return [{"name": n, "slots": s} for n, s in nodes.items()]


def ddp_spec(p: Any, name: str, step_time: float = 0.0, replicas: int = 4,
             **extra: Any) -> Path:
    """examples/ddp_mlp as `name`, checkpointing every 10 steps under the test's root; `extra`
    top-level spec keys (env, preemption) are set as given."""
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["name"] = name
    spec["pools"][0]["replicas"] = replicas
    spec["pools"][0]["command"] = ["python", str(EXAMPLE / "train.py"), "--epochs",
                                   str(EPOCHS), "--step-time", str(step_time), "--log-every", "5"]
    spec["checkpoint"] = {"every_steps": 10, "dir": str(p.root / f"ckpt-{name}")}
    spec.update(extra)
    path: Path = p.write(f"{name}.yaml", spec)
    return path


def final_sha(p: Any, name: str) -> str:
    """The sha256 of the final weights job `name` wrote (ddp_mlp's result.json)."""
    return str(json.loads((p.root / f"ckpt-{name}" / "result.json").read_text())["sha256"])


def local_reference_sha(root: Path, spec: Any = ddp_spec) -> str:
    """The final weights of an uninterrupted ddp_mlp run on the local backend, run under
    `root` with `spec` (a `ddp_spec`)."""
    p = Perdure(root)
    local = p.write("local.yaml", {"backend": "local", "nodes": nodes_field({"a": 4})})
    r = p.cli("run", str(spec(p, "clean")), "--cluster", str(local), check=False, timeout=180)
    kill_leftovers(p.state)
    assert r.returncode == 0, r.stdout + r.stderr
    return final_sha(p, "clean")


def describe(p: Any, job: str) -> dict[str, Any]:
    """`perdure describe JOB --json`, parsed."""
    d: dict[str, Any] = json.loads(p.cli("describe", job, "--json").stdout)
    return d


def wait_step(p: Any, job: str, at_least: int, timeout: float = 90) -> int:
    """Wait until job `job` has logged step `at_least` (in the worker logs of the state dir,
    where the backend mirrors them); the highest step logged."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        steps = [int(s) for log in p.state.glob(f"logs/{job}-*/attempt-*/worker-*.out")
                 for s in STEP.findall(log.read_text())]
        if max(steps, default=-1) >= at_least:
            return max(steps)
        time.sleep(0.2)
    raise AssertionError(f"training never reached step {at_least}")


def wait_state(p: Any, job: str, states: tuple[str, ...], timeout: float) -> dict[str, Any]:
    """Wait until job `job` is in one of `states`; its description then."""
    d: dict[str, Any] = p.wait(job, lambda d: d["state"] in states, timeout=timeout)
    return d
