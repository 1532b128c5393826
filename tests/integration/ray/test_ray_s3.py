"""Many hosts and no shared directory: a Ray job checkpointing to s3:// on an S3 server that
runs on the head host (moto, inside the head's namespace). The cluster file declares no
`shared_dirs`; the job is spread over hosts a and b, host b is killed, and the job resumes
from S3 on the survivor, ending with the same weights as the uninterrupted local run."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from raytest import RayPerdure
from tests.helpers.clusterjobs import ddp_spec, wait_state, wait_step
from tests.helpers.s3server import free_port, make_bucket, moto_python
from tests.helpers.stopping import stop_controller

pytestmark = pytest.mark.ray_long


@pytest.fixture
def head_s3(ray_perdure: RayPerdure, tmp_path: Path) -> Iterator[str]:
    """moto on the head host, at its address on the hosts' network; yields the endpoint."""
    head = ray_perdure.hosts.hosts["head"]
    route = subprocess.run(["ip", "route", "get", head.address], capture_output=True,
                           text=True, check=True).stdout
    assert ray_perdure.hosts.bridge in route, f"{head.address} is not on the test's bridge"
    port = free_port()
    endpoint = f"http://{head.address}:{port}"
    with open(tmp_path / "moto.log", "wb") as log:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", head.netns, str(moto_python()), "-m", "moto.server",
             "-H", head.address, "-p", str(port)], stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "moto.log").read_text()
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto did not start on the head host"
                time.sleep(0.2)
        yield endpoint
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)


@pytest.mark.timeout(480)
def test_a_job_on_s3_survives_a_host_with_no_shared_directory(
    ray_perdure: RayPerdure, head_s3: str, local_sha: str, tmp_path: Path,
) -> None:
    p = ray_perdure
    make_bucket(head_s3, "ckpt")
    # The AWS chain through a profile: the secret is in a credentials file, not in the spec.
    creds = tmp_path / "aws-credentials"
    creds.write_text("[perdure-test]\naws_access_key_id = AKIAHOSTS\n"
                     "aws_secret_access_key = hosts-secret-not-in-the-spec\n")
    cluster = p.ray_cluster(shared_dirs=[])
    assert "shared_dirs: []" in cluster.read_text()
    spec_path = ddp_spec(p, "ons3", step_time=0.1)
    spec = json.loads(json.dumps(__import__("yaml").safe_load(spec_path.read_text())))
    out = p.root / "result-ons3"
    spec["checkpoint"]["dir"] = "s3://ckpt/runs/ons3"
    spec["pools"][0]["command"] += ["--out", str(out), "--snapshot-every", "0"]
    spec["env"] = {"AWS_ENDPOINT_URL": head_s3, "AWS_PROFILE": "perdure-test",
                   "AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_DEFAULT_REGION": "us-east-1"}
    spec_path = p.write("ons3.yaml", spec)
    controller = p.popen("controller")
    try:
        p.cli("submit", str(spec_path))
        d = p.wait("ons3", lambda d: d["state"] == "RUNNING", timeout=120)
        assert {x["node"] for x in d["replicas"]} == {"a", "b"}, d["replicas"]
        wait_step(p, "ons3", 25)  # past two checkpoints (every 10 steps), on S3
        assert p.hosts.kill("b") > 0
        d = wait_state(p, "ons3", ("SUCCEEDED", "FAILED"), timeout=300)
        assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-15:])
        assert all(x["node"] == "a" for x in d["replicas"]), d["replicas"]
        logs = "".join(f.read_text() for f in p.state.glob("logs/ons3-*/attempt-*/worker-*.out"))
        assert "(checkpoint)" in logs, logs[-3000:]  # resumed from S3, not from scratch
        assert json.loads((out / "result.json").read_text())["sha256"] == local_sha
    finally:
        stop_controller(controller)
