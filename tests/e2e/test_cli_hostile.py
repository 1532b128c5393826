"""The CLI against careless and hostile use: one line naming the file, field or path, exit 2,
nothing stored or created on the way. Runs `perdure`'s entry point in this process."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from perdure.cli.main import main
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec
from perdure.core.states import JobState, ReplicaState
from perdure.store.sqlite import Store

POOL = {"name": "w", "command": ["python", "-c", "pass"]}


def perdure(capsys: pytest.CaptureFixture[str], state: Path, *args: str) -> tuple[int, str, str]:
    old = sys.argv
    sys.argv = ["perdure", "--state-dir", str(state), *args]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = old
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(result: tuple[int, str, str], *needles: str) -> str:
    code, out, err = result
    assert code == 2, (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


def store_job(state: Path, job_id: str, state_: JobState = JobState.QUEUED) -> Job:
    spec = JobSpec.model_validate({"name": job_id.split("-")[0], "pools": [POOL]})
    job = Job(id=job_id, spec=spec, spec_dir="/", created=1.0, replicas=make_replicas(spec))
    store = Store(state / "perdure.db")
    store.submit(job)
    if state_ is not JobState.QUEUED:
        job.state = state_
        store.commit_tick([job], [], None, None)
    store.close()
    return job


@pytest.mark.parametrize("args", [["ls"], ["ls", "--json"], ["describe", "x"], ["logs", "x"],
                                  ["node", "ls"], ["cancel", "x"]])
def test_read_only_commands_create_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           args: list[str]) -> None:
    one_line_error(perdure(capsys, tmp_path / "typo", *args), "no perdure state dir",
                   str(tmp_path / "typo"))
    assert not (tmp_path / "typo").exists()


def test_describe_a_job_no_controller_touched(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    store_job(tmp_path, "fresh-000001")
    code, out, err = perdure(capsys, tmp_path, "describe", "fresh-000001")
    assert code == 0 and "state QUEUED" in out, err
    code, out, err = perdure(capsys, tmp_path, "describe", "fresh", "--json")
    assert code == 0 and '"state": "QUEUED"' in out, err


def test_job_references_never_guess(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store_job(tmp_path, "a-000001")
    store_job(tmp_path, "a-000002")
    for ref in ("", "%", "_", "a-00000_"):
        err = one_line_error(perdure(capsys, tmp_path, "cancel", ref))
        assert "empty" in err or "no job" in err
    one_line_error(perdure(capsys, tmp_path, "cancel", "a-0000"), "a-000001", "a-000002")
    kinds = [c.kind for _, c in Store(tmp_path / "perdure.db").commands_after(0)]
    assert kinds == ["submit", "submit"]  # nothing was cancelled


def test_resume_a_failed_job_and_kill_an_exited_replica(capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path) -> None:
    store_job(tmp_path, "done-000001", JobState.FAILED)
    for command, word in (("resume", "resumed"), ("cancel", "cancelled"),
                          ("preempt", "preempted")):
        one_line_error(perdure(capsys, tmp_path, command, "done-000001"), "is FAILED",
                       f"cannot be {word}")
    job = store_job(tmp_path, "gone-000001", JobState.RUNNING)
    job.replicas[0].state, job.replicas[0].launch_id = ReplicaState.RUNNING, "gone-000001.1.w-0"
    Store(tmp_path / "perdure.db").commit_tick([job], [], None, None)
    one_line_error(perdure(capsys, tmp_path, "chaos", "kill", "gone-000001", "w-0"),
                   "no process")


@pytest.mark.parametrize("args", [["ls"], ["describe", "x"], ["cancel", "x"], ["submit", "S"],
                                  ["run", "S"], ["controller"], ["node", "ls"]])
def test_a_corrupt_state_dir_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                         args: list[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: s\npools: [{POOL}]\n".replace("'", ""))
    state = tmp_path / "state"
    state.mkdir()
    (state / "perdure.db").write_bytes(b"this is not sqlite" * 300)
    args = [str(spec) if a == "S" else a for a in args]
    one_line_error(perdure(capsys, state, *args), str(state / "perdure.db"),
                   "not a perdure database")


def test_a_bad_cluster_or_warm_pool_stores_nothing(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\npools: [{name: w, command: [python, -c, pass]}]\n")
    ray = tmp_path / "ray.yaml"
    ray.write_text("backend: ray\nnodes: [{name: a, slots: 1}]\n")
    state = tmp_path / "state"
    one_line_error(perdure(capsys, state, "run", str(spec), "--cluster", str(ray)), "ray")
    monkeypatch.setenv("PERDURE_WARM_POOL", "abc")
    one_line_error(perdure(capsys, state, "run", str(spec)), "PERDURE_WARM_POOL", "'abc'")
    assert not (state / "cluster.yaml").exists()
    assert not (state / "perdure.db").exists() or Store(state / "perdure.db").job_rows() == []


@pytest.mark.parametrize(
    ("pool", "extra", "needles"),
    [({"command": ["no-such-command-xyz"]}, "", ["pools.0.command", "'no-such-command-xyz'",
                                                  "PATH"]),
     ({"command": ["./missing.sh"]}, "", ["pools.0.command", "missing.sh", "does not exist"]),
     ({"command": ["python"]}, "workdir: nowhere\n", ["workdir", "nowhere",
                                                       "not a directory"])],
)
def test_commands_and_workdirs_are_checked_before_submit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, pool: dict[str, object], extra: str,
    needles: list[str],
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: s\n{extra}pools: [{{name: w, command: {pool['command']}}}]\n"
                    .replace("'", ""))
    for command in ("validate", "submit", "run"):
        one_line_error(perdure(capsys, tmp_path / "state", command, str(spec)), str(spec),
                       *needles)
    assert not (tmp_path / "state" / "perdure.db").exists()


def test_a_job_larger_than_the_default_node_is_refused(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    n = (os.cpu_count() or 1) + 1
    spec.write_text(f"name: s\npools: [{{name: w, replicas: {n}, command: [python]}}]\n")
    one_line_error(perdure(capsys, tmp_path / "state", "submit", str(spec)),
                   f"needs {n} slots", "--cluster")


def test_hostile_spec_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_bytes(b"name: s\xff\xfe\n")
    one_line_error(perdure(capsys, tmp_path, "validate", str(spec)), "not UTF-8")
    pairs = zip("abcdefg", "bcdefgh", strict=True)
    spec.write_text("a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in pairs))
    one_line_error(perdure(capsys, tmp_path, "validate", str(spec)), "aliases expand")


def test_a_full_disk_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\npools: [{name: w, command: [python, -c, pass]}]\n")
    state = tmp_path / "state"
    assert perdure(capsys, state, "submit", str(spec))[0] == 0

    def small_files() -> None:  # writes past 8 KiB fail with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    r = subprocess.run([sys.executable, "-m", "perdure.cli.main", "--state-dir", str(state),
                        "submit", str(spec)], capture_output=True, text=True, timeout=60,
                       preexec_fn=small_files)
    one_line_error((r.returncode, r.stdout, r.stderr), str(state / "perdure.db"),
                   "disk I/O error")


def test_describe_a_job_that_cannot_be_read_back(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    store_job(tmp_path, "odd-000001")
    Store(tmp_path / "perdure.db").db.execute("UPDATE jobs SET spec='{}'")
    for args in (["describe", "odd-000001"], ["describe", "odd", "--json"],
                 ["logs", "odd-000001"]):
        one_line_error(perdure(capsys, tmp_path, *args), "odd-000001 cannot be read back")
    assert perdure(capsys, tmp_path, "ls")[0] == 0


def test_an_endless_spec_file_is_cut_short(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    one_line_error(perdure(capsys, tmp_path, "validate", "/dev/zero"), "larger than")


@pytest.mark.parametrize(("value", "needle"), [
    ("relative/perdure", "is a relative path"),
    ("/nonexistent/perdure-cgroup", "does not exist"),
    ("/tmp", "is not a cgroup directory"),
])
def test_a_bad_cgroup_parent_is_said_at_start(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              value: str, needle: str) -> None:
    monkeypatch.setenv("PERDURE_CGROUP_PARENT", value)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: cg\npools: [{name: w, command: [python, -c, pass]}]\n")
    err = one_line_error(perdure(capsys, tmp_path / "state", "run", str(spec)),
                         f"PERDURE_CGROUP_PARENT={value} {needle}", "such as /")
    assert "not a cgroup-v2 directory" not in err and "cluster:" not in err
