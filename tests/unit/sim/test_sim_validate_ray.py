"""bench/sim_validate.py --scenario ray: bench/ray.py's window through the real core, with a
restart's costs on Ray taken from a bench/ray.py --json run's phases."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from perdure.sim.calibration import Calibration, dump

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "sim_validate.py"
CALIB = Calibration(step_seconds=0.029, launch_cold_seconds=7.0, launch_warm_seconds=0.07,
                    launch_first_seconds=2.4, stop_seconds=0.05, rendezvous_seconds=0.03,
                    save_blocking_seconds=0.008, persist_seconds=0.09,
                    restore_disk_seconds=0.1, restore_local_seconds=0.02, restore_peer_seconds=0.02,
                    snapshot_blocking_seconds=0.008)


def _ray_run(path: Path, script: float, goodput: float) -> Path:
    """A bench/ray.py --json document: 5 kills 30 s apart, every rank running the script
    `script` s after each kill."""
    path.write_text(json.dumps({"interval": 30.0, "every": 20, "perdure": {
        "duration": 180.0, "kills": 5, "kill_offsets": [30.0, 60.0, 90.0, 120.0, 150.0],
        "goodput": goodput, "step_seconds": 0.029,
        "phases": {"script": script, "init": script + 0.03, "model": script + 0.07,
                   "restore": script + 0.1}}, "raytrain": {"goodput": 0.5}}))
    return path


def _predicted(tmp: Path, run: Path, calibrated_on: Path | None = None) -> tuple[float, str]:
    cal = tmp / "calibration.yaml"
    cal.write_text(dump(CALIB, {}))
    extra = ["--ray-calibration", str(calibrated_on)] if calibrated_on else []
    out = subprocess.run([sys.executable, str(SCRIPT), "--scenario", "ray", "--calibration",
                          str(cal), "--ray-json", str(run), *extra], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    found = re.search(r"perdure sim \(the real core\)\s+(\d\.\d{3})", out)
    assert found, out
    return float(found.group(1)), out


def test_the_ray_scenario_is_predicted_from_the_runs_own_phases(tmp_path: Path) -> None:
    quick, out = _predicted(tmp_path, _ray_run(tmp_path / "quick.json", 0.8, 0.95))
    assert "(the same run)" in out and "Ray Train, same run" in out, out
    assert re.search(r"difference \d+\.\d points: (within|NOT within) 2 points", out), out
    slow, _ = _predicted(tmp_path, _ray_run(tmp_path / "slow.json", 2.2, 0.9))
    # 1.4 s more per kill, 5 kills in 180 s: ~4 points less (and never more)
    assert 0.02 < quick - slow < 0.06, (quick, slow)


def test_costs_can_come_from_another_run(tmp_path: Path) -> None:
    run = _ray_run(tmp_path / "run.json", 0.8, 0.95)
    other = _ray_run(tmp_path / "other.json", 2.2, 0.9)
    predicted, out = _predicted(tmp_path, run, calibrated_on=other)
    assert "(the same run)" not in out and str(other) in out, out
    assert predicted == _predicted(tmp_path, other)[0]
