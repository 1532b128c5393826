"""A job on Ray must checkpoint where every node reaches (no shared filesystem is assumed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perdure.backends.ray.checks import check_shared_checkpoint
from perdure.core.clusterspec import parse_cluster
from perdure.core.spec import parse_job_spec
from perdure.core.specread import SpecError

RAY = "backend: ray\nray: {address: 'h:6379', shared_dirs: [/mnt/shared]}\n"
JOB = "name: j\npools: [{name: w, command: [python, t.py]}]\n"


def job(checkpoint: str | None) -> object:
    text = JOB + (f"checkpoint: {{dir: '{checkpoint}'}}\n" if checkpoint else "")
    return parse_job_spec(text)


@pytest.mark.parametrize("where", ["s3://bucket/run", "gs://bucket/x", "/mnt/shared/ckpt",
                                   "file:///mnt/shared/c"])
def test_a_url_or_a_declared_shared_dir_is_accepted(where: str) -> None:
    check_shared_checkpoint(job(where), "/home/u/job", "/var/perdure", parse_cluster(RAY))


@pytest.mark.parametrize("where", [None, "ckpt", "/mnt/sharedx/c", "/tmp/c", "file:///tmp/c"])
def test_a_path_on_the_controllers_disk_only_is_refused(where: str | None) -> None:
    with pytest.raises(SpecError, match=r"checkpoint.dir: .*controller's machine only"):
        check_shared_checkpoint(job(where), "/home/u/job", "/var/perdure", parse_cluster(RAY))


def test_the_local_backend_asks_nothing() -> None:
    cluster = parse_cluster("backend: local\nnodes: [{name: a, slots: 1}]\n")
    check_shared_checkpoint(job("/tmp/c"), "/x", "/y", cluster)


def test_ray_section_needs_the_ray_backend() -> None:
    with pytest.raises(SpecError, match="ray: only for `backend: ray`"):
        parse_cluster("backend: local\nnodes: [{name: a, slots: 1}]\nray: {address: auto}\n")


def test_submit_refuses_it_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    cluster = tmp_path / "ray.yaml"
    cluster.write_text(yaml.safe_dump({"backend": "ray", "ray": {"address": "127.0.0.1:1"}}))
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB)
    r = subprocess.run([sys.executable, "-m", "perdure.cli.main", "--state-dir",
                        str(tmp_path / "s"), "submit", str(spec), "--cluster", str(cluster)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "the default checkpoint dir" in r.stderr and "shared_dirs" in r.stderr
    assert "import ray" not in r.stderr
