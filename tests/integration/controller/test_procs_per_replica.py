"""procs_per_replica and GPUs on the local backend, on real processes through the CLI.

No GPU is needed: the cluster file declares virtual GPUs (ids 0..N-1 on a host with none), and
each process prints the environment it got. The DDP runs are real (gloo): 2 replicas x 2 local
ranks train the same model as 4 replicas x 1 and must end with the same weights; a local rank
SIGKILLed mid-run fails its replica, which is restarted (the group resumes from its
checkpoint) and the job succeeds.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from test_resume_harness import current_launch
from tests.helpers.harness import Perdure

HERE = Path(__file__).parent
ENV_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "CUDA_VISIBLE_DEVICES",
             "PERDURE_REPLICA")
# Writes its env to $OUT/env-RANK.json, then waits for all 4 ranks so none is stopped early.
PRINT_ENV = (
    "import json, os, time, pathlib; out = pathlib.Path(os.environ['OUT']); "
    f"names = {ENV_NAMES!r}; "
    "(out / f\"env-{os.environ['RANK']}.json\").write_text("
    "json.dumps({n: os.environ.get(n) for n in names})); "
    "deadline = time.time() + 60\n"
    "while len(list(out.glob('env-*.json'))) < 4 and time.time() < deadline: time.sleep(0.05)"
)


def gpu_cluster(p: Perdure, gpus: int) -> Path:
    return p.write("cluster.yaml", {"backend": "local",
                                    "nodes": [{"name": "a", "slots": 4, "gpus": gpus}]})


def test_each_local_rank_gets_torchruns_env_and_its_replicas_gpus(
        perdure: Perdure, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out = tmp_path / "out"
    out.mkdir()
    spec = perdure.spec(replicas=2, command=["python", "-c", PRINT_ENV], env={"OUT": str(out)},
                        pool={"procs_per_replica": 2, "gpus": 2})
    r = perdure.cli("run", str(spec), "--cluster", str(gpu_cluster(perdure, 4)), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    envs = {int(f.stem.split("-")[1]): json.loads(f.read_text()) for f in out.glob("env-*")}
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, env in envs.items():
        replica, local = divmod(rank, 2)
        assert env == {
            "RANK": str(rank), "WORLD_SIZE": "4", "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": str(replica), "GROUP_WORLD_SIZE": "2",
            "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": "4",
            # each replica its own GPUs, disjoint; both of its ranks see them in order
            "CUDA_VISIBLE_DEVICES": ["0,1", "2,3"][replica],
            "PERDURE_REPLICA": f"worker-{replica}",
        }, rank
    # describe, its JSON (the API's too) and node ls show the GPUs
    text = perdure.cli("describe", "job").stdout
    assert "procs 2  gpus 2 (0,1)" in text and "procs 2  gpus 2 (2,3)" in text, text
    replicas = perdure.describe("job")["replicas"]
    assert [(x["gpus"], x["devices"], x["procs"]) for x in replicas] == [
        (2, [0, 1], 2), (2, [2, 3], 2)]
    assert "a            4 slots  4 GPUs  READY" in perdure.cli("node", "ls").stdout


def test_a_job_that_can_never_get_its_gpus_is_refused_at_submit(
        perdure: Perdure, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    spec = perdure.spec(replicas=3, pool={"gpus": 2})
    r = perdure.cli("run", str(spec), "--cluster", str(gpu_cluster(perdure, 4)), check=False)
    assert r.returncode != 0
    assert "the job needs 6 GPUs" in r.stderr and "a (4)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def ddp_spec(p: Perdure, name: str, replicas: int, procs: int, out: Path, steps: int = 60,
             step_time: float = 0.05, hold_at: int = -1) -> Path:
    return p.spec(name=name, replicas=replicas, command=["python", str(HERE / "plain_job.py")],
                  env={"OUT": str(out), "STEPS": str(steps), "STEP_TIME": str(step_time),
                       "HOLD_AT": str(hold_at)},
                  checkpoint={"dir": str(out / "ckpt"), "every_steps": 5},
                  pool={"procs_per_replica": procs})


def wait_step(p: Perdure, job: str, step: int, timeout: float = 120) -> dict[str, Any]:
    return p.wait(job, lambda d: (d.get("step") or 0) >= step, timeout=timeout)


def ranks_of(p: Perdure, job: str, replica: str) -> list[dict[str, int]]:
    """The local ranks' processes of a replica's running launch (its status.json)."""
    launch = current_launch(p.state, p.describe(job)["id"], replica)
    assert launch is not None
    status = json.loads((p.state / "launches" / launch / "status.json").read_text())
    return list(status["ranks"])


@pytest.mark.local_long
@pytest.mark.timeout(400)
def test_ddp_two_by_two_trains_exactly_like_four_replicas(perdure: Perdure, tmp_path: Path) -> None:
    cluster = perdure.cluster({"a": 2, "b": 2})
    results = {}
    for name, replicas, procs in (("ref", 4, 1), ("pairs", 2, 2)):
        out = tmp_path / name
        out.mkdir()
        r = perdure.cli("run", str(ddp_spec(perdure, name, replicas, procs, out, steps=30,
                                            step_time=0)),
                        "--cluster", str(cluster), check=False, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        results[name] = json.loads((out / "result.json").read_text())
    assert results["pairs"] == results["ref"]  # same ranks, same gradients, same weights


@pytest.mark.timeout(400)
def test_a_killed_local_rank_fails_its_replica_which_restarts(
        perdure: Perdure, tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    run = perdure.popen("run", str(ddp_spec(perdure, "pairs", 2, 2, out, steps=30, hold_at=10)),
                        "--cluster", str(perdure.cluster({"a": 2, "b": 2})))
    try:
        wait_step(perdure, "pairs", 10)  # every rank then holds until $OUT/go exists
        victim = ranks_of(perdure, "pairs", "worker-1")[1]  # local rank 1 of replica 1: RANK 3
        os.kill(victim["pid"], signal.SIGKILL)
        (out / "go").touch()
        output, _ = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, output
    d = perdure.describe("pairs")
    assert d["state"] == "SUCCEEDED"
    decisions = [e["message"] for e in d["events"] if e["kind"] == "decision"]
    assert any("worker-1 exited 137 (SIGKILL) in local rank 1" in m for m in decisions), decisions
    assert d["replicas"][1]["restarts"] == 1
    assert json.loads((out / "result.json").read_text())["steps"] == 30
