"""The state dir's secret (0600, made once) and the per-job secrets handed to launches."""

from __future__ import annotations

import hashlib
import hmac
import stat
import threading
from pathlib import Path

import pytest

from perdure.backends.relay.secrets import SecretError, job_secret, state_secret
from perdure.core.launchenv import LaunchSettings, build_launch
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec


def test_state_secret_is_private_and_made_once(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = state_secret(state)
    path = state / "secret"
    assert len(first) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert state_secret(state) == first  # read back, not remade


def test_concurrent_creators_agree(tmp_path: Path) -> None:
    got: list[bytes] = []
    threads = [threading.Thread(target=lambda: got.append(state_secret(tmp_path)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1 and len(got) == 8


def test_a_damaged_secret_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"short")
    with pytest.raises(SecretError, match="secret: expected 32 bytes, found 5"):
        state_secret(tmp_path)


def test_a_state_dir_that_cannot_hold_it_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(SecretError, match=r"file/state/secret: cannot be created or read"):
        state_secret(tmp_path / "file" / "state")


def test_job_secret_is_hmac_of_the_job_id() -> None:
    key = bytes(range(32))
    expected = hmac.new(key, b"job-abc", hashlib.sha256).hexdigest()
    assert job_secret(key, "job-abc") == expected
    assert job_secret(key, "job-abd") != expected
    assert job_secret(bytes(32), "job-abc") != expected


def test_every_launch_carries_its_jobs_secret(tmp_path: Path) -> None:
    spec = JobSpec.model_validate({"name": "j", "pools": [
        {"name": "worker", "replicas": 2, "command": ["python", "t.py"]}]})
    job = Job("j-1", spec, "/work", 0.0, replicas=make_replicas(spec))
    key = state_secret(tmp_path)
    settings = LaunchSettings(str(tmp_path), "/usr/bin/python3",
                              job_secret=lambda job_id: job_secret(key, job_id))
    for r in job.replicas:
        env = build_launch(job, r, settings).env
        assert env["PERDURE_JOB_SECRET"] == job_secret(key, "j-1")
