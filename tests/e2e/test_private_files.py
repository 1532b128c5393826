"""What perdure writes under a state dir is its owner's only: the state dir 0700 whoever makes
it first, checkpoints inside 0600 files in 0700 directories, the staging dir 0700."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PERDURE = [sys.executable, "-m", "perdure.cli.main"]
SAVER = ("import torch\n"
         "from perdure.runtime.checkpoint import Checkpointer\n"
         "import sys\n"
         "ckpt = Checkpointer(sys.argv[1]) if len(sys.argv) > 1 else Checkpointer()\n"
         "ckpt.save(1, {'model': torch.nn.Linear(4, 2), 'step': 1})\n"
         "ckpt.wait()\n")


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """A user's usual umask (022): what perdure makes private, it makes so itself."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def run_job(tmp: Path, state: Path, *args: str, env: dict[str, str] | None = None) -> None:
    (tmp / "saver.py").write_text(SAVER)
    argv = ", ".join(["python", "saver.py", *args])
    (tmp / "job.yaml").write_text(f"name: saver\npools: [{{name: w, command: [{argv}]}}]\n")
    r = subprocess.run([*PERDURE, "--state-dir", str(state), "run", str(tmp / "job.yaml")],
                       capture_output=True, text=True, timeout=240,
                       env={**os.environ, "PERDURE_WARM_POOL": "0", **(env or {})})
    assert r.returncode == 0, r.stdout + r.stderr


def test_checkpoints_under_the_state_dir_are_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_job(tmp_path, state)
    assert mode(state) == 0o700
    saved = list((state / "checkpoints").rglob("*"))
    assert any(p.name.endswith(".distcp") for p in saved), saved
    for p in [state / "checkpoints", *saved]:
        assert mode(p) == (0o700 if p.is_dir() else 0o600), (p, oct(mode(p)))


def test_checkpoints_elsewhere_follow_the_umask(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    run_job(tmp_path, tmp_path / "state", str(shared / "run"))
    saved = list((shared / "run").rglob("*"))
    assert saved and all(mode(p) == (0o755 if p.is_dir() else 0o644) for p in saved)


def test_the_staging_dir_is_private(tmp_path: Path) -> None:
    base = tmp_path / "fast"
    base.mkdir(mode=0o755)
    url = "memory://perdure-private-test"
    run_job(tmp_path, tmp_path / "state", url, env={"PERDURE_STAGING_DIR": str(base)})
    staging = base / f"perdure-staging-{os.getuid()}"
    assert mode(staging) == 0o700


def test_a_state_dir_made_by_serve_is_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = subprocess.Popen([*PERDURE, "serve", "--port", "0", "--no-controller",
                             "--state-dir", str(state)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "perdure serve: http://" in line, line
        assert mode(state) == 0o700 and mode(state / "api-token") == 0o600
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_a_state_dir_left_open_by_an_older_perdure_is_closed(tmp_path: Path) -> None:
    from perdure.store.sqlite import Store

    old = tmp_path / "old-state"
    old.mkdir(mode=0o755)
    Store(old / "perdure.db").close()
    old.chmod(0o755)  # as an older `perdure serve` left it
    project = tmp_path / "project"  # not a state dir yet: someone's directory, left alone
    project.mkdir(mode=0o755)
    Store(old / "perdure.db").close()
    Store(project / "perdure.db").close()
    assert mode(old) == 0o700 and mode(project) == 0o755
