"""Through the CLI: every replica gets its job's secret, and a kernel OOM kill of a replica
without `memory_mb` fails the job as OUT_OF_MEMORY (not a restart-spending SIGKILL)."""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from perdure.backends.node import memory
from perdure.backends.relay.secrets import job_secret, state_secret

PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def run(state: Path, spec: Path, env: dict[str, str] | None = None,
        cgroup: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`perdure run spec`, the whole of it (controller, spawner, replicas) in `cgroup`."""

    def enter() -> None:
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    return subprocess.run([*PERDURE, "--state-dir", str(state), "run", str(spec)],
                          capture_output=True, text=True, timeout=150,
                          env={**os.environ, **(env or {})}, preexec_fn=enter)


def describe(state: Path) -> dict[str, object]:
    rows = json.loads(subprocess.run([*PERDURE, "--state-dir", str(state), "ls", "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    out = subprocess.run([*PERDURE, "--state-dir", str(state), "describe", rows[0]["id"],
                          "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def test_each_replica_gets_its_jobs_secret(tmp_path: Path) -> None:
    (tmp_path / "show.py").write_text(
        "import os, pathlib, time\n"
        "print('secret', os.environ['PERDURE_JOB_SECRET'], flush=True)\n"
        "pathlib.Path(os.environ['PERDURE_REPLICA']).touch()\n"
        "while not os.path.exists('worker-1'):  # the primary's exit stops the others\n"
        "    time.sleep(0.02)\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("name: sec\npools: [{name: worker, replicas: 2, command: [python, show.py]}]\n")
    state = tmp_path / "state"
    done = run(state, spec, {"PERDURE_WARM_POOL": "0"})
    assert done.returncode == 0, done.stderr
    job = describe(state)
    expected = job_secret(state_secret(state), str(job["id"]))
    assert stat.S_IMODE((state / "secret").stat().st_mode) == 0o600
    for replica in ("worker-0", "worker-1"):
        log = next(state.glob(f"logs/{job['id']}/attempt-1/{replica}.out")).read_text()
        assert f"secret {expected}" in log


@pytest.fixture
def small_host() -> Iterator[Path]:
    """A cgroup of 384 MiB standing in for a host that runs out of memory."""
    try:
        own = memory.own_cgroup_dir("cgroup-v1")
    except OSError:
        pytest.skip("no writable cgroup v1 memory controller here")
    parent = Path(own) / f"perdure-test-{os.getpid()}-{secrets.token_hex(4)}"
    parent.mkdir()
    (parent / "memory.limit_in_bytes").write_text(str(384 << 20))
    yield parent
    for child in parent.rglob("*"):
        if child.is_dir() and (child / "cgroup.procs").exists():
            memory.remove_cgroup(str(child))
    for child in sorted(parent.iterdir(), reverse=True):
        if child.is_dir():
            child.rmdir()
    parent.rmdir()


def test_a_host_oom_kill_fails_the_job_as_out_of_memory(tmp_path: Path,
                                                        small_host: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: hog\npools: [{name: worker, command: [python, -c, "
                    "\"x = bytearray(1 << 30)\"]}]\n")  # no memory_mb
    state = tmp_path / "state"
    done = run(state, spec, {"PERDURE_WARM_POOL": "0"}, cgroup=small_host)
    assert done.returncode != 0
    job = describe(state)
    error = job["error"]
    assert isinstance(error, dict) and error["code"] == "OUT_OF_MEMORY", job
    assert error["message"] == ("Replica worker-0 ran out of memory and exited with a non-zero "
                                "status of 137.")
    replica = job["replicas"][0]  # type: ignore[index]
    assert replica["restarts"] == 0
