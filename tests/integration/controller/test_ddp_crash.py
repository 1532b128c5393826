"""An unmodified DDP script that raises fails its job at once, named after the exception
(issue 19 section 1): torch prefixes stderr with `[rankN]: ` after init_process_group."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.harness import Perdure

SCRIPT = Path(__file__).with_name("ddp_crash_job.py")


@pytest.mark.parametrize(("where", "expected"), [
    ("before-init", "ValueError: bad config: lr must be positive"),
    ("after-init", "ValueError: bad shape: expected 8, got 7"),
    ("loader-worker",
     "KeyError: Caught KeyError in DataLoader worker process 1: 'sample 5 is corrupt'"),
])
def test_an_uncaught_exception_in_a_ddp_script_fails_the_job_at_once(
        perdure: Perdure, where: str, expected: str) -> None:
    cluster = perdure.cluster({"local": 2})
    spec = perdure.spec(replicas=2, command=["python", str(SCRIPT), where],
                        env={"OMP_NUM_THREADS": "1"})
    r = perdure.cli("run", str(spec), "--cluster", str(cluster), check=False, timeout=180)
    assert r.returncode == 1, r.stdout + r.stderr
    d = perdure.describe("job")
    assert d["state"] == "FAILED" and d["attempt"] == 1, r.stdout
    assert all(x["restarts"] == 0 for x in d["replicas"]), r.stdout
    assert d["error"]["code"] == "USER_CODE"
    message = d["error"]["message"]
    # The loader's worker number depends on which of the 2 workers got sample 5.
    if where == "loader-worker":
        expected = expected.replace("process 1", f"process {message.split('process ')[1][0]}")
    assert message.endswith(f"Termination reason: {expected}."), message
    assert "uncaught exception" in r.stdout


def test_a_crash_loop_is_named_after_its_exception(perdure: Perdure) -> None:
    # An exception the policy restarts on (it reads like a lost peer), raised every time.
    code = "raise RuntimeError('Connection closed by peer [127.0.0.1]:1234')"
    spec = perdure.spec(command=["python", "-c", code],
                        restart={"max_replica_restarts": 1, "max_job_retries": 0})
    r = perdure.cli("run", str(spec), check=False, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    d = perdure.describe("job")
    assert d["error"]["message"] == (
        "Replica worker-0 raised the same exception 2 times in a row (a crash loop): "
        "RuntimeError: Connection closed by peer [127.0.0.1]:1234."), r.stdout
