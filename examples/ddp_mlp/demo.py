"""The demo: a 4-replica DDP job, one replica killed mid-run, the job recovers and succeeds.

`make demo` runs this. It drives perdure the way a person would, through the CLI: `perdure
run` in the foreground, then `perdure chaos kill` from the side once training is under way.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def wait_for_step(state: Path, step: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for log in state.glob("logs/*/attempt-1/worker-0.out"):
            steps = [int(m) for m in re.findall(r"^step (\d+)", log.read_text(), re.M)]
            if steps and max(steps) >= step:
                return
        time.sleep(0.2)
    raise SystemExit(f"training did not reach step {step} in {timeout:.0f}s")


def main() -> int:
    state = Path(tempfile.mkdtemp(prefix="perdure-demo-")) / "state"
    base = [*PERDURE, "--state-dir", str(state)]
    print(f"$ perdure run {HERE / 'job.yaml'} --cluster {HERE / 'cluster.yaml'}", flush=True)
    run = subprocess.Popen([*base, "run", str(HERE / "job.yaml"),
                            "--cluster", str(HERE / "cluster.yaml")])
    wait_for_step(state, 100)
    print("\n$ perdure chaos kill ddp-mlp worker-2   # a replica crashes mid-run", flush=True)
    subprocess.run([*base, "chaos", "kill", "ddp-mlp", "worker-2"], check=True)
    code = run.wait(timeout=300)
    print("\n$ perdure describe ddp-mlp", flush=True)
    subprocess.run([*base, "describe", "ddp-mlp"], check=True)
    print(f"\nstate, logs and events are under {state}")
    return code


if __name__ == "__main__":
    sys.exit(main())
