"""Commands as people write them: a `bash -c` wrapper runs perdure's `python`, a command the
shell cannot find fails the job at once in the shell's words, `ps` shows a warm-started
replica's own command, and `describe --json` names each replica's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

PERDURE = [sys.executable, "-m", "perdure.cli.main"]
# What a user's shell may well have: no `python` on it (Debian has python3 only)
BARE_PATH = "/usr/local/bin:/usr/bin:/bin"


def _run(tmp: Path, pool: dict[str, Any], **top: Any) -> tuple[subprocess.CompletedProcess[str],
                                                               dict[str, Any]]:
    spec = tmp / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "job", "pools": [{"name": "worker", **pool}],
                                    "env": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
                                    **top}))
    state = str(tmp / "state")
    env = {**os.environ, "PATH": BARE_PATH}
    run = subprocess.run([*PERDURE, "run", str(spec), "--state-dir", state], env=env,
                         capture_output=True, text=True, timeout=180)
    described = subprocess.run([*PERDURE, "describe", "job", "--json", "--state-dir", state],
                               capture_output=True, text=True, timeout=60, check=True)
    return run, json.loads(described.stdout)


def test_python_in_a_wrapper_is_perdures_interpreter(tmp_path: Path) -> None:
    code = "import sys; print('interpreter', sys.executable)"
    run, d = _run(tmp_path, {"command": ["bash", "-c", f'exec python -c "{code}"']})
    assert run.returncode == 0, run.stdout + run.stderr
    log = next((tmp_path / "state").glob("logs/*/attempt-1/worker-0.out")).read_text()
    used = log.split("interpreter ")[1].split()[0]
    assert os.path.dirname(used) == os.path.dirname(sys.executable)
    pid = d["replicas"][0]["pid"]
    assert isinstance(pid, int) and pid > 0


def test_a_command_the_shell_cannot_find_fails_at_once_in_its_words(tmp_path: Path) -> None:
    run, d = _run(tmp_path, {"command": ["bash", "-c", "exec pythonx train.py"]})
    assert run.returncode == 1
    assert d["state"] == "FAILED" and d["attempt"] == 1 and d["replicas"][0]["restarts"] == 0
    message = d["error"]["message"]
    assert message.startswith("Replica worker-0 exited with a non-zero status of 127: a command "
                              "it runs is not found. Last stderr: ")
    assert message.endswith("exec: pythonx: not found"), message
    launches = [e for e in d["events"] if e["kind"] == "launch" or "admitted" in e["message"]]
    assert len(launches) == 1


def test_ps_shows_a_warm_replicas_own_command(tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text(
        "import os, sys\n"
        "cmdline = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        "print('cmdline', [a.decode() for a in cmdline if a], flush=True)\n"
        "sys.exit(1 if os.environ['PERDURE_RESTART_COUNT'] == '0' else 0)\n")
    run, _ = _run(tmp_path, {"command": ["python", "show.py", "--flag", "1"]})
    assert run.returncode == 0, run.stdout + run.stderr
    status = [json.loads(p.read_text()) for p in sorted((tmp_path / "state").glob(
        "launches/*.worker-0.*/status.json"))]
    assert status[-1]["warm"], status  # the restart ran in a warm standby
    shown = [line for line in next((tmp_path / "state").glob(
        "logs/*/attempt-1/worker-0.out")).read_text().splitlines() if line.startswith("cmdline")]
    assert shown[-1] == f"cmdline {[sys.executable, 'show.py', '--flag', '1']!r}"


def test_a_restart_that_starts_over_is_in_describe(tmp_path: Path) -> None:
    code = "import os, sys; sys.exit(1 if os.environ['PERDURE_RESTART_COUNT'] == '0' else 0)"
    run, d = _run(tmp_path, {"command": ["python", "-c", code]})
    assert run.returncode == 0, run.stdout + run.stderr
    assert d["starts_over"].startswith("worker-0 restarts from the beginning: nothing tells "
                                       "perdure this script resumes; ~"), d["starts_over"]
    text = subprocess.run([*PERDURE, "describe", "job", "--state-dir", str(tmp_path / "state")],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"Lost work: {d['starts_over']}" in text.splitlines()
