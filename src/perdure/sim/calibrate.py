"""`perdure sim calibrate`: a calibration file from this machine's own benchmark runs.

Side effects: runs bench/recovery.py (perdure warm and cold, a replica SIGKILLed on a
schedule, `--phases`) and bench/checkpoint.py as subprocesses of a checkout (they are not in
the installed package), reads their `--json` summaries and writes the calibration file.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from perdure.core.specread import SpecError
from perdure.sim.calibration import Calibration, dump


def bench_dir() -> Path:
    """bench/ of the checkout perdure runs from (or of the working directory)."""
    for root in (Path(__file__).resolve().parents[3], Path.cwd()):
        if (root / "bench" / "recovery.py").exists():
            return root / "bench"
    raise SpecError("calibrate runs bench/recovery.py and bench/checkpoint.py: run it from a "
                    "perdure checkout (they are not part of the installed package)")


def _run(args: list[str], out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, *args, "--json", str(out)], env=env, text=True,
                          capture_output=True, timeout=3600)
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stdout + proc.stderr)[-2000:]
        raise SpecError(f"{' '.join(args[:1])} failed ({proc.returncode}):\n{tail}")
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def _median_gap(rows: list[dict[str, float | None]], a: str, b: str) -> float:
    gaps = [float(r[b]) - float(r[a]) for r in rows  # type: ignore[arg-type]
            if r.get(a) is not None and r.get(b) is not None]
    return max(0.0, statistics.median(gaps)) if gaps else 0.0


def derive(recovery: dict[str, Any], ckpt: dict[str, Any], command: str) -> Calibration:
    """The calibration fields from the two summaries."""
    warm, cold = recovery["perdure"], recovery.get("perdure-cold", recovery["perdure"])

    def launch(o: dict[str, Any]) -> float:
        rows = o["phases"]
        return _median_gap(rows, "launched", "script") + _median_gap(rows, "init", "model")

    rows = warm["phases"]
    return Calibration(
        model=ckpt.get("model", "examples/ddp_mlp"),
        source=f"measured on this machine ({os.cpu_count()} cores): {command}",
        step_seconds=warm["step_seconds"],
        launch_cold_seconds=launch(cold),
        launch_warm_seconds=launch(warm),
        launch_first_seconds=max(0.0, (warm["first_step_seconds"] or 0.0)
                                 - _median_gap(rows, "init", "model")
                                 - _median_gap(rows, "script", "init")),
        stop_seconds=_median_gap(rows, "decided", "survivors_exited"),
        rendezvous_seconds=_median_gap(rows, "script", "init"),
        save_blocking_seconds=ckpt["save_blocking_s"],
        persist_seconds=ckpt["persist_s"],
        restore_disk_seconds=ckpt["restore_s"],
        restore_local_seconds=_median_gap(rows, "model", "restore"),
        restore_peer_seconds=_median_gap(rows, "model", "restore"),
        snapshot_blocking_seconds=ckpt["save_blocking_s"],
        snapshot_every_steps=10,
        nccl_timeout_seconds=600.0,
        manual_restart_seconds=3600.0,
    )


COMMENTS = {
    "step_seconds": "bench/recovery.py: steady step time of examples/ddp_mlp",
    "launch_cold_seconds": "phases launched->script + init->model, PERDURE_WARM_POOL=0",
    "launch_warm_seconds": "phases launched->script + init->model, warm pool auto",
    "launch_first_seconds": "the job's first step after its start, less rendezvous and model",
    "stop_seconds": "phases decided->survivors exited",
    "rendezvous_seconds": "phases script->init (perdure.init: process group up)",
    "save_blocking_seconds": "bench/checkpoint.py: training blocked per async save",
    "persist_seconds": "bench/checkpoint.py: persist until committed",
    "restore_disk_seconds": "bench/checkpoint.py: restore from the committed checkpoint",
    "restore_local_seconds": "phases model->restore (node-local snapshot)",
    "restore_peer_seconds": "not measured apart: the node-local figure",
    "snapshot_blocking_seconds": "the same host copy as a save",
    "nccl_timeout_seconds": "torch's default process-group timeout (not measured)",
    "manual_restart_seconds": "an assumption: an operator resubmits within the hour",
}


def calibrate(out: Path, quick: bool) -> str:
    bench = bench_dir()
    duration, kill = ("60", "20") if quick else ("120", "30")
    rec_args = [str(bench / "recovery.py"), "--systems", "perdure,perdure-cold", "--phases",
                "--duration", duration, "--kill-every", kill]
    ck_args = [str(bench / "checkpoint.py"), "--gib", "0.1" if quick else "0.25", "--reps", "3"]
    with tempfile.TemporaryDirectory(prefix="perdure-calibrate-") as tmp:
        recovery = _run(rec_args, Path(tmp) / "recovery.json")
        ckpt = _run(ck_args, Path(tmp) / "checkpoint.json")
    command = " && ".join(" ".join(["python", *a]) for a in (rec_args, ck_args))
    calib = derive(recovery, ckpt, command)
    out.write_text(dump(calib, COMMENTS))
    return f"wrote {out}\n{out.read_text()}"
