"""Does `perdure sim` predict what a real run measures? Goodput side by side, same scenario.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/sim_validate.py [--calibration FILE]
        [--duration 120] [--kill-every 30] [--scenario recovery|ray] [--ray-json FILE]
        [--ray-calibration FILE]

1. A calibration: the file given, else `perdure sim calibrate --quick` now (this machine).
2. The real run: bench/recovery.py, perdure only (examples/ddp_mlp, 4 replicas on two virtual
   nodes of 2 slots, a replica SIGKILLed every --kill-every seconds), with its `--json`.
3. The simulation of that scenario through the real core: the same spec shape, one transient
   failure per kill at the same times, the example's checkpoint interval (--every steps) and
   its node-local snapshots, warm restarts.
Printed: the measured goodput (perdure's own `describe` account, and the bench's
steps-kept figure) beside the simulated one, and whether they agree within 2 points.

`--scenario ray`: bench/ray.py's (perdure on a Ray cluster of namespace hosts, 4 replicas
spread 2 + 2 over hosts a and b, a training process SIGKILLed every 30 s, 5 kills; the window
opens at the first step) instead of running bench/recovery.py: the real run is `--ray-json`
(a bench/ray.py `--json` file) or bench/ray.py run now. What a restart costs on Ray (the launch
through Ray and its actors, the process group, the restore) is not what the local calibration
measured: it is taken from the phases of `--ray-calibration` (another bench/ray.py `--json`
run; default: the validated run itself, said so in the output); the rest (step time, saves,
stop) from the calibration.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

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


DETECT_SECONDS = 0.05  # a SIGKILLed replica's exit is seen at once (the supervisor's wait)


def on_ray(calib: calibration.Calibration, ray_run: dict[str, Any]) -> calibration.Calibration:
    """The calibration with a restart's costs on Ray, from a bench/ray.py run's perdure phases
    (seconds from the kill until every rank passed each mark, median over the kills)."""
    ph = ray_run["perdure"]["phases"]
    launched = ph["script"] - DETECT_SECONDS - calib.stop_seconds  # kill -> every rank runs
    return calib.model_copy(update={
        "step_seconds": ray_run["perdure"]["step_seconds"],
        "launch_warm_seconds": max(0.0, launched) + max(0.0, ph["model"] - ph["init"]),
        "rendezvous_seconds": max(0.0, ph["init"] - ph["script"]),
        "restore_local_seconds": max(0.0, ph["restore"] - ph["model"]),
        "restore_peer_seconds": max(0.0, ph["restore"] - ph["model"]),
        # the window opens at the first step: the job's first start is outside it
        "launch_first_seconds": 0.0})


def simulate_ray(calib: calibration.Calibration, real: dict[str, Any],
                 every_steps: int) -> float | None:
    """bench/ray.py's window through the real core: host a (4 slots) and b (2), kills at the
    run's own offsets from the first step (ranks 1, 2, 3, 0, ...: 2 on each host)."""
    spec = JobSpec.model_validate({
        "name": "raybench", "pools": [{"name": "worker", "replicas": 4,
                                       "command": ["python", "train.py"]}],
        "restart": {"max_replica_restarts": 1000}})
    crash = Category.model_validate({"name": "sigkill", "per_gpu_day": 0.0, "scope": "gpu",
                                     "kind": "transient", "detect_seconds": DETECT_SECONDS})
    draws = [Draw(t, crash, (k + 1) % 4 // 2) for k, t in enumerate(real["kill_offsets"])]
    policy = Policy("bench", "the example's settings", interval=every_steps * calib.step_seconds,
                    hangs="watchdog", warm=True, snapshots=True)
    result = Engine(spec, {"a": (4, 0), "b": (2, 0)}, draws, calib, policy,
                    real["duration"]).run()
    return result.goodput.goodput


def validate_ray(calib: calibration.Calibration, args: argparse.Namespace, tmp: Path) -> None:
    if args.ray_json is None:
        args.ray_json = str(tmp / "ray.json")
        subprocess.run([sys.executable, str(HERE / "ray.py"), "--every", str(args.every),
                        "--json", args.ray_json], check=True)
    run = json.loads(Path(args.ray_json).read_text())
    source = args.ray_calibration or args.ray_json
    ray_calib = on_ray(calib, json.loads(Path(source).read_text()))
    real = run["perdure"]
    predicted = simulate_ray(ray_calib, real, int(run.get("every", args.every)))
    print(f"\nscenario: bench/ray.py ({args.ray_json}), {real['duration']:.0f} s window, "
          f"{real['kills']} kills; restart costs on Ray from {source}"
          f"{' (the same run)' if source == args.ray_json else ''}: launch "
          f"{ray_calib.launch_warm_seconds:.2f} s, rendezvous "
          f"{ray_calib.rendezvous_seconds:.2f} s, restore {ray_calib.restore_local_seconds:.2f} s")
    print(f"{'':<34} {'goodput':>8}")
    print(f"{'measured: steps kept / window':<34} {real['goodput']:8.3f}")
    print(f"{'perdure sim (the real core)':<34} {predicted or 0.0:8.3f}")
    if "raytrain" in run:
        print(f"{'measured: Ray Train, same run':<34} {run['raytrain']['goodput']:8.3f}")
    if predicted is not None:
        gap = abs(predicted - real["goodput"]) * 100
        print(f"difference {gap:.1f} points: {'within' if gap <= 2 else 'NOT within'} 2 points")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calibration")
    p.add_argument("--scenario", choices=("recovery", "ray"), default="recovery")
    p.add_argument("--ray-json", help="a bench/ray.py --json file (else bench/ray.py runs now)")
    p.add_argument("--ray-calibration",
                   help="the bench/ray.py --json run whose phases give a restart's costs on "
                        "Ray (default: the validated run itself)")
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
    if args.scenario == "ray":
        validate_ray(calib, args, tmp)
        return
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
