"""Does `perdure sim` predict what a real run measures? Goodput side by side, same scenario.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/sim_validate.py [--calibration FILE]
        [--duration 120] [--kill-every 30]

1. A calibration: the file given, else `perdure sim calibrate --quick` now (this machine).
2. The real run: bench/recovery.py, perdure only (examples/ddp_mlp, 4 replicas on two virtual
   nodes of 2 slots, a replica SIGKILLed every --kill-every seconds), with its `--json`.
3. The simulation of that scenario through the real core: the same spec shape, one transient
   failure per kill at the same times, the example's checkpoint interval (--every steps) and
   its node-local snapshots, warm restarts.
Printed: the measured goodput (perdure's own `describe` account, and the bench's
steps-kept figure) beside the simulated one, and whether they agree within 2 points.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from perdure.core.spec import JobSpec
from perdure.sim import calibration
from perdure.sim.engine import Engine
from perdure.sim.failures import Category, Draw
from perdure.sim.policies import Policy

HERE = Path(__file__).resolve().parent


def simulate(calib: calibration.Calibration, kills: int, duration: float, kill_every: float,
             every_steps: int) -> float | None:
    spec = JobSpec.model_validate({
        "name": "recovery", "pools": [{"name": "worker", "replicas": 4,
                                       "command": ["python", "train.py"]}],
        "restart": {"max_replica_restarts": 100}})
    crash = Category.model_validate({"name": "sigkill", "per_gpu_day": 0.0, "scope": "gpu",
                                     "kind": "transient", "detect_seconds": 0.05})
    # kills go to ranks 1, 2, 3, 0, ... : nodes a (ranks 0, 1) and b (ranks 2, 3)
    draws = [Draw(kill_every * (k + 1), crash, (k + 1) % 4 // 2) for k in range(kills)]
    policy = Policy("bench", "the example's settings", interval=every_steps * calib.step_seconds,
                    hangs="watchdog", warm=True, snapshots=True)
    result = Engine(spec, {"a": (2, 0), "b": (2, 0)}, draws, calib, policy, duration).run()
    return result.goodput.goodput


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calibration")
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--kill-every", type=float, default=30.0)
    p.add_argument("--every", type=int, default=20)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="perdure-sim-validate-"))
    cal_path = args.calibration or str(tmp / "calibration.yaml")
    if args.calibration is None:
        subprocess.run([sys.executable, "-m", "perdure.cli.main", "sim", "calibrate", "--quick",
                        "--out", cal_path], check=True)
    calib = calibration.load(cal_path)
    out = tmp / "recovery.json"
    subprocess.run([sys.executable, str(HERE / "recovery.py"), "--systems", "perdure",
                    "--phases", "--duration", str(args.duration), "--kill-every",
                    str(args.kill_every), "--every", str(args.every), "--json", str(out)],
                   check=True)
    real = json.loads(out.read_text())["perdure"]
    predicted = simulate(calib, real["kills"], args.duration, args.kill_every, args.every)
    measured = real["describe_goodput"]
    print(f"\nscenario: bench/recovery.py, {args.duration:.0f} s, a kill every "
          f"{args.kill_every:.0f} s ({real['kills']} kills), calibration {cal_path}")
    print(f"{'':<34} {'goodput':>8}")
    print(f"{'measured: perdure describe':<34} {measured:8.3f}")
    print(f"{'measured: steps kept / duration':<34} {real['goodput']:8.3f}")
    print(f"{'perdure sim (the real core)':<34} {predicted or 0.0:8.3f}")
    if measured is not None and predicted is not None:
        gap = abs(predicted - measured) * 100
        print(f"difference {gap:.1f} points: {'within' if gap <= 2 else 'NOT within'} 2 points")


if __name__ == "__main__":
    main()
