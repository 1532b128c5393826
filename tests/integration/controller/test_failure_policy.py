"""One test per row of the failure table, on real processes through the CLI."""

from __future__ import annotations

import time

from tests.helpers.harness import Perdure


def run(p: Perdure, spec, *args: str, timeout: float = 120):
    return p.cli("run", str(spec), *args, check=False, timeout=timeout)


def test_exit_1_twice_then_0_succeeds_with_two_restarts(perdure: Perdure) -> None:
    code = "import os,sys; sys.exit(1 if int(os.environ['PERDURE_RESTART_COUNT']) < 2 else 0)"
    r = run(perdure, perdure.spec(command=["python", "-c", code]))
    assert r.returncode == 0, r.stdout + r.stderr
    d = perdure.describe("job")
    assert d["state"] == "SUCCEEDED" and d["replicas"][0]["restarts"] == 2
    assert "restart worker-0 exited 1: non-zero exit, restart 2 of 5" in r.stdout


def test_always_exit_3_fails_after_restarts_and_retries(perdure: Perdure) -> None:
    r = run(perdure, perdure.spec(command=["python", "-c", "raise SystemExit(3)"]))
    assert r.returncode == 1
    d = perdure.describe("job")
    assert d["state"] == "FAILED" and d["attempt"] == 4
    assert d["error"]["code"] == "USER_CODE"
    assert d["error"]["message"] == "Replica worker-0 exited with a non-zero status of 3."
    launches = [e for e in d["events"] if e["kind"] == "launch" or "admitted" in e["message"]]
    assert len(launches) == 24  # 4 attempts x (1 + 5 restarts)


def test_exit_134_retries_the_job(perdure: Perdure) -> None:
    code = "import os; os.abort() if os.environ['PERDURE_ATTEMPT'] == '1' else None"
    r = run(perdure, perdure.spec(command=["python", "-c", code]))
    assert r.returncode == 0, r.stdout
    d = perdure.describe("job")
    assert d["attempt"] == 2 and d["replicas"][0]["restarts"] == 0
    assert d["retries"] == {"USER_CODE": 1}
    assert "transient exit code, job retry 1 of 3" in r.stdout


def test_over_memory_limit_fails_out_of_memory(perdure: Perdure) -> None:
    code = ("import time; b = bytearray(400 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
            "time.sleep(5)")
    r = run(perdure, perdure.spec(command=["python", "-c", code], pool={"memory_mb": 128}))
    assert r.returncode == 1
    d = perdure.describe("job")
    assert d["state"] == "FAILED"
    assert d["error"] == {
        "code": "OUT_OF_MEMORY",
        "message": "Replica worker-0 ran out of memory and exited with a non-zero status of 137.",
    }


def test_uncaught_exception_fails_at_once_with_reason(perdure: Perdure) -> None:
    code = "import perdure; perdure.init(); raise ValueError('bad shape')"
    r = run(perdure, perdure.spec(replicas=2, command=["python", "-c", code]))
    assert r.returncode == 1
    d = perdure.describe("job")
    assert d["state"] == "FAILED" and d["attempt"] == 1
    assert d["error"]["code"] == "USER_CODE"
    assert d["error"]["message"].endswith("Termination reason: ValueError: bad shape.")
    assert all(x["restarts"] == 0 for x in d["replicas"])


def test_traceback_without_runtime_is_recognised(perdure: Perdure) -> None:
    r = run(perdure, perdure.spec(command=["python", "-c", "raise KeyError('w1')"]))
    assert r.returncode == 1
    assert perdure.describe("job")["error"]["message"].endswith(
        "Termination reason: KeyError: 'w1'.")


def test_primary_exit_0_stops_the_others(perdure: Perdure) -> None:
    code = ("import os,time,sys; sys.exit(0) if os.environ['RANK'] == '0' else time.sleep(600)")
    began = time.time()
    r = run(perdure, perdure.spec(replicas=2, command=["python", "-c", code],
                                  pool={"grace": 1}))
    assert r.returncode == 0, r.stdout
    assert time.time() - began < 30
    d = perdure.describe("job")
    assert d["state"] == "SUCCEEDED"
    assert d["replicas"][1]["exit_code"] == 143  # stopped by SIGTERM once its grace ran out
    assert "stopped at the end of its grace after the primary succeeded" in r.stdout


def test_after_the_primary_succeeds_the_others_finish_within_the_grace(
        perdure: Perdure) -> None:
    # Rank 1 ends 1.5 s after rank 0, as DDP ranks do a moment apart: not a SIGTERM.
    code = ("import os,time,sys; time.sleep(0 if os.environ['RANK'] == '0' else 1.5)")
    r = run(perdure, perdure.spec(replicas=2, command=["python", "-c", code]))
    assert r.returncode == 0, r.stdout
    d = perdure.describe("job")
    assert [x["status"] for x in d["replicas"]] == ["finished", "finished"]
    assert "worker-1 finished" in r.stdout and "SIGTERM" not in r.stdout


def test_job_larger_than_a_fixed_cluster_is_refused_at_submit(perdure: Perdure) -> None:
    """The local backend's capacity is fixed: no waiting out placement timeouts for slots
    that do not exist (missing-for-now capacity is tests/unit/core's INSUFFICIENT_CAPACITY)."""
    cluster = perdure.cluster({"a": 2, "b": 2})
    spec = perdure.spec(replicas=3, pool={"slots": 2})
    r = run(perdure, spec, "--cluster", str(cluster))
    assert r.returncode == 2
    assert "needs 6 slots" in r.stderr and "a (2), b (2)" in r.stderr
    assert "--cluster" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (perdure.state / "perdure.db").exists()  # nothing was submitted


def test_an_executable_script_without_a_shebang_is_user_code_at_once(perdure: Perdure) -> None:
    script = perdure.root / "train.sh"
    script.write_text("echo training\n")  # no #! line: exec says ENOEXEC
    script.chmod(0o755)
    r = run(perdure, perdure.spec(command=["./train.sh"]))
    assert r.returncode == 1, r.stdout
    d = perdure.describe("job")
    assert d["state"] == "FAILED" and d["attempt"] == 1 and d["retries"] == {}
    assert d["error"]["code"] == "USER_CODE"
    assert str(script) in d["error"]["message"] and "#!" in d["error"]["message"]
