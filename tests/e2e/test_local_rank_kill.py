"""procs_per_replica: a SIGKILLed local rank fails its replica the same way every time, and is
seen as soon as a one-process replica's death: its sibling, stuck where a SIGTERM handler
never runs, is not waited for through the stop grace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from perdure.backends.node.localranks import RANK_STOP_GRACE_SECONDS

PERDURE = [sys.executable, "-m", "perdure.cli.main"]
SCRIPT = """
import os, pathlib, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as a rank blocked in a collective
restarts = int(os.environ["PERDURE_RESTART_COUNT"])
mark = pathlib.Path(os.environ["OUT"]) / f"pid-{os.environ['LOCAL_RANK']}-{restarts}"
mark.write_text(str(os.getpid()))
sys.exit(0) if restarts >= 3 else time.sleep(300)
"""


def test_each_kill_of_a_local_rank_is_reported_alike_and_at_once(tmp_path: Path) -> None:
    (tmp_path / "rank.py").write_text(SCRIPT)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "job", "env": {"OUT": str(tmp_path)},
        "pools": [{"name": "worker", "procs_per_replica": 2,
                   "command": ["python", "rank.py"]}]}))
    state = str(tmp_path / "state")
    run = subprocess.Popen([*PERDURE, "--state-dir", state, "run", str(spec)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed: list[float] = []
    try:
        for restart in range(3):
            mark = tmp_path / f"pid-1-{restart}"
            deadline = time.time() + 120
            while not mark.exists() or not mark.read_text():
                assert time.time() < deadline and run.poll() is None, run.communicate()[0]
                time.sleep(0.05)
            killed.append(time.time())
            os.kill(int(mark.read_text()), signal.SIGKILL)
        out, _ = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, out
    described = subprocess.run([*PERDURE, "--state-dir", state, "describe", "job", "--json"],
                               capture_output=True, text=True, timeout=60, check=True)
    events = json.loads(described.stdout)["events"]
    restarts = [e for e in events if e["kind"] == "decision" and e["message"].startswith(
        "restart worker-0")]
    assert [e["message"].split(": non-zero")[0] for e in restarts] == [
        "restart worker-0 exited 137 (SIGKILL) in local rank 1"] * 3, restarts
    seen = [e["time"] - k for e, k in zip(restarts, killed, strict=True)]
    print(f"\nlocal rank SIGKILL -> restart decided: {', '.join(f'{s:.2f}' for s in seen)} s")
    assert all(s < RANK_STOP_GRACE_SECONDS for s in seen), seen  # not held for the grace
