"""PerdureTrainer against a stock Hugging Face Trainer (with PerdureCallback, which reports
both), on the same GPT-2 from a config, 2 replicas under `perdure run`: training blocked per
save, time to resume after a SIGKILL, and goodput with one SIGKILL every --kill-every seconds.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/frameworks.py [--embd 256 --layers 4]

Blocked time per save: the `checkpoint_save` records the callback reports, from the end of
the step to the end of the Trainer's save (for the stock Trainer its synchronous save; for
PerdureTrainer the copy into host buffers), of the slower replica (the other waits for it at
the next step's all-reduce), median over the saves. Resume: the `restore` record of each
launch after a kill (train() called -> the first step can start), of the slower replica,
median over the kills. Goodput: `perdure describe`'s productive time / running time over a
run of --duration seconds with a SIGKILL of worker-1 every --kill-every seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.helpers.clusterjobs, which the harness imports
sys.path.insert(0, str(ROOT / "tests" / "integration" / "frameworks"))
from fwharness import Job, kill_leftovers  # noqa: E402

SCRIPT = ROOT / "tests" / "integration" / "frameworks" / "hf_train.py"


def slowest(job: Job, kind: str) -> list[float]:
    """Per (launch, step) of a ``kind`` record, the longest one of the replicas'."""
    longest: dict[tuple[str, Any], float] = {}
    for replica in (f"worker-{n}" for n in range(job.replicas)):
        for launch, recs in job.progress(replica).items():
            for r in recs:
                if r.get("kind") == kind and (kind != "restore" or r.get("step")):
                    key = (launch, r.get("step"))
                    longest[key] = max(longest.get(key, 0.0), float(r["seconds"]))
    return list(longest.values())


def measure(kind: str, root: Path, a: argparse.Namespace) -> dict[str, Any]:
    args = ["--trainer", kind, "--embd", str(a.embd), "--layers", str(a.layers),
            "--steps", str(a.steps), "--save-steps", str(a.save_steps)]
    job = Job(root / kind, "fw", SCRIPT, 2, args=args, env={"STEP_TIME": str(a.step_time)})
    run = job.start()
    began = time.time()
    kills = 0
    try:
        while run.poll() is None and time.time() - began < a.duration:
            time.sleep(1.0)
            if time.time() - began >= (kills + 1) * a.kill_every and job.step() > 0:
                try:
                    job.sigkill("worker-1")
                    kills += 1
                except (OSError, ValueError):
                    pass
        if run.poll() is None:
            job.cli("cancel", "fw")
        run.communicate(timeout=300)
        d = job.describe()
    finally:
        kill_leftovers(job.state)
    saves, restores = slowest(job, "checkpoint_save"), slowest(job, "restore")
    g = d.get("goodput", {})
    return {"kind": kind, "kills": kills, "saves": len(saves),
            "blocked_per_save_s": statistics.median(saves) if saves else None,
            "resume_s": statistics.median(restores) if restores else None,
            "goodput": g.get("goodput"), "last_step": g.get("last_step"),
            "badput": g.get("badput_seconds")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--embd", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--save-steps", type=int, default=50)
    p.add_argument("--step-time", type=float, default=0.0)
    p.add_argument("--duration", type=float, default=180.0, help="seconds per variant")
    p.add_argument("--kill-every", type=float, default=60.0)
    a = p.parse_args()
    print(f"$ {' '.join(sys.argv)}  (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})",
          flush=True)
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-frameworks-"))
    results = [measure(kind, root, a) for kind in ("stock", "perdure")]
    for r in results:
        print(json.dumps(r), flush=True)
    s, q = results
    for what, key in (("blocked per save", "blocked_per_save_s"), ("resume", "resume_s")):
        if s[key] and q[key]:
            print(f"{what}: stock {s[key]:.3f} s, PerdureTrainer {q[key]:.3f} s "
                  f"({q[key] / s[key]:.2f}x)")
    print(f"goodput with a kill every {a.kill_every:.0f} s: stock {s['goodput']}, "
          f"PerdureTrainer {q['goodput']} (load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
