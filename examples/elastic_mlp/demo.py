"""The elastic demo: lose a node mid-run, keep training on the survivors, get it back.

`python examples/elastic_mlp/demo.py` drives perdure the way a person would, through the CLI:
`perdure run` in the foreground, then `perdure chaos fail-node a` (two of the four replicas
die) and later `perdure node restore a` from the side. The two survivors on node b are never
restarted: they go on as a group of 2, and the group grows back to 4 at a step boundary once
the replacements are up.
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


def steps_seen(state: Path, world: int | None = None) -> int:
    """The highest step any replica printed (at `world` size, if given)."""
    best = -1
    for log in state.glob("logs/*/attempt-*/worker-*.out"):
        for step, w in re.findall(r"^step (\d+) world (\d+)", log.read_text(), re.M):
            if world is None or int(w) == world:
                best = max(best, int(step))
    return best


def wait_for(what: str, pred: object, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise SystemExit(f"{what}: not seen within {timeout:.0f}s")


def main(spec: Path = HERE / "job.yaml") -> int:
    state = Path(tempfile.mkdtemp(prefix="perdure-elastic-demo-")) / "state"
    base = [*PERDURE, "--state-dir", str(state)]
    print(f"$ perdure run {spec} --cluster {HERE / 'cluster.yaml'}", flush=True)
    run = subprocess.Popen([*base, "run", str(spec), "--cluster", str(HERE / "cluster.yaml")])
    wait_for("step 100", lambda: steps_seen(state) >= 100)
    print("\n$ perdure chaos fail-node a   # two replicas die with their node", flush=True)
    subprocess.run([*base, "chaos", "fail-node", "a"], check=True)
    wait_for("training at world size 2", lambda: steps_seen(state, world=2) >= 0)
    time.sleep(2)
    print("\n$ perdure node restore a     # capacity is back", flush=True)
    subprocess.run([*base, "node", "restore", "a"], check=True)
    code = run.wait(timeout=600)
    print("\n$ perdure describe elastic-mlp", flush=True)
    subprocess.run([*base, "describe", "elastic-mlp"], check=True)
    print(f"\nstate, logs and events are under {state}")
    return code


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "job.yaml"))
