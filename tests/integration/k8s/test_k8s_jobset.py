"""`perdure export k8s` checked against the real JobSet controller on the test cluster: the
exported DDP example runs to completion, and a SIGKILLed rank restarts the whole JobSet as its
failurePolicy says, resuming from the last checkpoint to the local backend's final weights."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8scluster import K8sCluster, K8sUnavailable
from k8sjobs import ddp_spec, export_jobset, for_test_cluster, rank_pid
from k8sjobset import CRD, JobSet
from tests.helpers.clusterjobs import EPOCHS, local_reference_sha


@pytest.fixture(scope="module")
def jobset(k8s: K8sCluster) -> Iterator[JobSet]:
    try:
        js = JobSet(k8s)
        js.up()
    except K8sUnavailable as exc:
        pytest.skip(f"no JobSet controller: {exc}")
    try:
        yield js
    finally:
        js.down()


def condition(js: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True"
               for c in js.get("status", {}).get("conditions") or [])


def steps(timeline: Path) -> list[dict[str, Any]]:
    if not timeline.exists():
        return []
    out = []
    for line in timeline.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "step" in record:
            out.append(record)
    return out


def wait_step(timeline: Path, at_least: int, timeout: float, jobset: JobSet) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r["step"] >= at_least for r in steps(timeline)):
            return
        time.sleep(0.3)
    raise TimeoutError(f"no step {at_least} in {timeout:.0f}s\n{jobset.log_tail()}")


@pytest.mark.k8s_long
def test_exported_ddp_job_completes_and_a_killed_rank_restarts_the_jobset(
        k8s: K8sCluster, jobset: JobSet, tmp_path: Path,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path
    os.chmod(root, 0o755)
    timeline = root / "timeline.jsonl"
    spec = ddp_spec(root, "ddp-js", EPOCHS, step_time=0.1,
                    extra_args=("--timeline", str(timeline)))
    exported, warnings = export_jobset(spec, CRD)  # the controller's own, whole CRD
    assert "checkpoint.dir" in warnings  # a path, not a URL: the test mounts it on every host
    k8s.kubectl("apply", "-f", "-", input=json.dumps(for_test_cluster(exported, root)))
    try:
        wait_step(timeline, 15, 300, jobset)  # the checkpoint of step 10 is committed
        before = {p["metadata"]["uid"] for p in k8s.get("pods", "-l",
                                                        "jobset.sigs.k8s.io/jobset-name=ddp-js")
                  ["items"]}
        pid = rank_pid("ddp-js", 1)
        assert pid is not None
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        js = k8s.wait_for("jobset ddp-js", lambda j: j.get("status", {}).get("restarts") == 1,
                          timeout=120)
        assert js["status"].get("restartsCountTowardsMax") == 1  # RestartJobSet: counted
        js = k8s.wait_for("jobset ddp-js", lambda j: condition(j, "Completed")
                          or condition(j, "Failed"), timeout=400, interval=1)
        assert condition(js, "Completed"), json.dumps(js["status"])
        pods = k8s.get("pods", "-l", "jobset.sigs.k8s.io/jobset-name=ddp-js")["items"]
        assert pods and not {p["metadata"]["uid"] for p in pods} & before  # all recreated
        assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"]
                for p in pods} == {"1"}
        old = {r["pid"] for r in steps(timeline) if r["t"] <= killed}
        after = [r for r in steps(timeline) if r["t"] > killed and r["pid"] not in old]
        first = min(after, key=lambda r: r["t"])
        assert first["step"] > 10, first  # the new ranks resumed from a checkpoint
        print(f"JobSet restarted; step {first['step']} done by a new rank 0 "
              f"{first['t'] - killed:.1f} s after the SIGKILL")
        result = json.loads((root / "ckpt" / "result.json").read_text())
    finally:
        k8s.kubectl("delete", "jobset", "ddp-js", "--wait=false")
    assert result["sha256"] == local_reference_sha(tmp_path_factory.mktemp("local-ref"))
