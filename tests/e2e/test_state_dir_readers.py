"""Commands that read a state dir (issue 36.13, 36.14): one `perdure run` is making reads as
empty, never `no such table: jobs`; one on a read-only mount is read; an empty `perdure.db`
gets one line saying what it is."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perdure.cli.main import app

PERDURE = [sys.executable, "-m", "perdure.cli.main"]
SPEC = "name: quick\npools: [{name: w, command: [python, -c, 'print(1)']}]\n"
NO_STATE = "no perdure state dir here"


def ls_json(state: Path) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["--state-dir", str(state), "ls", "--json"])
    return r.exit_code, r.output


def test_ls_polled_while_run_makes_the_state_dir_never_fails(tmp_path: Path) -> None:
    """A real `perdure run` starting, `ls --json` polled in a loop (in this process: a poll
    every few milliseconds, so the moments between the file and its tables are seen)."""
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    answers: list[tuple[int, str]] = []
    for attempt in range(3):
        state = tmp_path / f"state-{attempt}"
        run = subprocess.Popen([*PERDURE, "--state-dir", str(state), "run", str(spec)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "PERDURE_WARM_POOL": "0"})
        try:
            seen_jobs = False
            deadline = time.monotonic() + 60
            while not seen_jobs and time.monotonic() < deadline:
                code, out = ls_json(state)
                answers.append((code, out))
                seen_jobs = code == 0 and bool(json.loads(out))
        finally:  # the job seen: its run is done with making the state dir
            run.terminate()
            run.wait(timeout=120)
    wrong = [(c, o) for c, o in answers
             if not (c == 0 and isinstance(json.loads(o), list)) and NO_STATE not in o]
    assert not wrong, wrong[:3]
    assert any(c == 0 and json.loads(o) == [] for c, o in answers) or len(answers) > 3


def test_an_empty_database_file_is_explained_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "perdure.db").touch()
    began = time.monotonic()
    code, out = ls_json(tmp_path)
    assert code == 2 and time.monotonic() - began < 10
    assert out.count("\n") == 1 and "perdure.db: empty, with none of perdure's tables" in out, \
        out
    assert (tmp_path / "perdure.db").stat().st_size == 0  # a reader never writes it


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state dir with a finished job, as `run` left it."""
    base = tmp_path_factory.mktemp("finished")
    spec = base / "s.yaml"
    spec.write_text(SPEC)
    done = subprocess.run([*PERDURE, "--state-dir", str(base / "state"), "run", str(spec)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return base / "state"


@pytest.fixture(params=["closed", "with its WAL"])
def read_only(finished: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A copy of `finished` seen through a read-only bind mount (root) or with its write
    permissions taken away (another user): closed (no -wal, no -shm: as archived, or once
    its last reader closed), or as `run` left it."""
    state = tmp_path / "state"
    shutil.copytree(finished, state)
    if request.param == "closed":  # the last connection to close removes -wal and -shm
        db = sqlite3.connect(state / "perdure.db")
        db.execute("SELECT count(*) FROM jobs").fetchone()
        db.close()
        assert not (state / "perdure.db-shm").exists()
    view = tmp_path / "view"
    view.mkdir()
    if os.geteuid() != 0:
        shutil.copytree(state, view, dirs_exist_ok=True)
        for p in [view, *view.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        yield view
        return
    mounted = subprocess.run(["mount", "--bind", str(state), str(view)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True)
        yield view
    finally:
        subprocess.run(["umount", "-l", str(view)], check=True)


def test_ls_and_describe_read_a_read_only_state_dir(read_only: Path) -> None:
    with pytest.raises(OSError):
        (read_only / "probe").write_text("")  # really read-only
    listed = subprocess.run([*PERDURE, "--state-dir", str(read_only), "ls", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    jobs = json.loads(listed.stdout)
    assert [j["state"] for j in jobs] == ["SUCCEEDED"]
    shown = subprocess.run([*PERDURE, "--state-dir", str(read_only), "describe", jobs[0]["id"]],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "SUCCEEDED" in shown.stdout, shown.stderr
