"""A note the runtime sends just before the replica exits ("incomplete checkpoint skipped")
is among the job's events, as `perdure run` and `perdure describe` show them: through the
state dir's files, and through the controller's relay (`transport: net`), whose records go
from a thread, even when the replica ends by `os._exit` right after the note."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

NOTE = "checkpoint folders checkpoint-9 were not completed by every rank: skipped"


@pytest.mark.parametrize("transport", ["file", "net"])
def test_a_note_sent_right_before_the_exit_is_in_the_events(tmp_path: Path,
                                                            transport: str) -> None:
    code = f"import os; from perdure.runtime import goodput; goodput.note({NOTE!r}); os._exit(0)"
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "noted", "pools": [
        {"name": "worker", "command": ["python", "-c", code]}]}))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"nodes": [{"name": "a", "slots": 1}],
                                       "transport": transport}))
    perdure = [sys.executable, "-m", "perdure.cli.main", "--state-dir", str(tmp_path / "s")]
    run = subprocess.run([*perdure, "run", str(spec), "--cluster", str(cluster)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"[runtime] worker-0: {NOTE}" in run.stdout, run.stdout
    describe = subprocess.run([*perdure, "describe", "noted"], capture_output=True, text=True,
                              timeout=120)
    assert f"[runtime] worker-0: {NOTE}" in describe.stdout, describe.stdout
