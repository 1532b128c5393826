"""Control characters and markup from replicas are shown, never obeyed, in every CLI view:
an exception message that sets the window title, recolours, erases the line and forges a
`controller: job SUCCEEDED` line with an embedded newline prints escaped, on one line, in
`perdure run` and `perdure describe`; `ls` shows a cell's markup as text. `perdure logs`
stays raw (it is the replica's own output)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_cli_hostile import perdure, store_job

from perdure.core.records import Event
from perdure.core.states import JobState
from perdure.store.sqlite import Store

HOSTILE = ("boom \\x1b]0;TITLE\\x07 \\x1b[31mred\\x1b[0m [red]markup[/red] \\x1b[2K"
           "\\ncontroller: job SUCCEEDED")
FORGED = "controller: job SUCCEEDED"


def shown_not_obeyed(text: str) -> None:
    """`text` (a command's output) holds the hostile message escaped, and nothing raw."""
    assert "\x1b" not in text and "\x07" not in text, text
    assert not any(line.strip().startswith(FORGED) for line in text.splitlines()), text
    assert "boom ^[]0;TITLE^G ^[[31mred^[[0m [red]markup[/red] ^[[2K\\n" + FORGED in text, text


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perdure.cli.main", "--state-dir", str(state),
                           *args], capture_output=True, text=True, timeout=120)


def test_a_hostile_exception_message_is_escaped_in_run_and_describe(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "hostile", "pools": [{
        "name": "worker", "command": ["python", "-c", f"raise ValueError('{HOSTILE}')"]}],
        "restart": {"max_replica_restarts": 0, "max_job_retries": 0}}))
    state = tmp_path / "state"
    run = cli(state, "run", str(spec))
    assert run.returncode == 1, run.stdout + run.stderr
    shown_not_obeyed(run.stdout)
    assert run.stdout.splitlines()[-1].endswith(" FAILED")
    describe = cli(state, "describe", "hostile")
    assert describe.returncode == 0, describe.stderr
    shown_not_obeyed(describe.stdout)
    error = next(line for line in describe.stdout.splitlines() if line.startswith("Error: "))
    assert error.startswith("Error: USER_CODE: ") and FORGED in error  # one line, escaped
    logs = cli(state, "logs", "hostile")  # raw, as the replica wrote it
    assert "\x1b]0;TITLE\x07" in logs.stdout and "\n" + FORGED in logs.stdout


def test_ls_and_describe_show_a_queue_reason_escaped_and_unmarked(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    job = store_job(state, "held-000001")
    job.backend_queue = "Slurm: [bold red]Resources[/] \x1b[2K\x1b]0;TITLE\x07\n" + FORGED
    store = Store(state / "perdure.db")
    store.commit_tick([job], [Event(2.0, job.id, "controller", "\x1b[31mnote\x1b[0m\nforged")],
                      None, None)
    store.close()
    assert job.state is JobState.QUEUED
    for args in (["ls"], ["describe", job.id]):
        code, out, err = perdure(capsys, state, *args)
        assert code == 0, err
        assert "\x1b" not in out and "\x07" not in out and "[bold red]Resources[/]" in out, out
        assert "^[[2K^[]0;TITLE^G\\n" + FORGED in out, out
        assert not any(line.strip().startswith(FORGED) for line in out.splitlines()), out
    assert "^[[31mnote^[[0m\\nforged" in out

