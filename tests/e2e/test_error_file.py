"""A replica's exception with a huge message still fails its job as USER_CODE, at once."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

PERDURE = [sys.executable, "-m", "perdure.cli.main"]
RAISER = ("from perdure.runtime.errors import install_excepthook\n"
          "install_excepthook()\n"
          "raise ValueError('bad batch: ' + 'x' * 5_000_000 + ' (end)')\n")


def test_a_5_mb_exception_message_fails_the_job_as_user_code(tmp_path: Path) -> None:
    (tmp_path / "raiser.py").write_text(RAISER)
    (tmp_path / "job.yaml").write_text(
        "name: huge\npools: [{name: w, command: [python, raiser.py]}]\n"
        "restart: {max_replica_restarts: 3}\n")
    state = tmp_path / "state"
    env = {**os.environ, "PERDURE_WARM_POOL": "0"}
    run = subprocess.run([*PERDURE, "--state-dir", str(state), "run", str(tmp_path / "job.yaml")],
                         capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode != 0, run.stdout
    job = run.stdout.split()[1]
    d = json.loads(subprocess.run([*PERDURE, "--state-dir", str(state), "describe", job,
                                   "--json"], capture_output=True, text=True, timeout=60,
                                  check=True).stdout)
    assert d["state"] == "FAILED" and d["error"]["code"] == "USER_CODE", d["error"]
    assert "ValueError: bad batch: xxx" in d["error"]["message"]
    assert len(d["error"]["message"]) < 10_000
    assert [r["restarts"] for r in d["replicas"]] == [0]  # not the restart path
    files = list((state / "launches").glob("*/error.json"))
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert all(f.stat().st_size < 200_000 for f in files)
