"""What one async save of a small state costs, one process: examples/ddp_mlp's model and AdamW.

    .venv/bin/python bench/smallsave.py [--saves 60] [--before-src DIR]

Per save (median over the saves after the first 10): the wall time `save()` held the caller,
the caller's CPU in it (`time.thread_time`), and the CPU the rest of the process spent per save
(the persist thread: serialising, checksums, the commit; `process_time` minus the main
thread's), each save waited for before the next. `--before-src` runs the same in a child
process on other perdure sources (an older commit's `src`, from `git archive`), interleaved
with this tree's, so the two are measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(saves: int, hidden: int) -> dict[str, float]:
    """Medians, in ms, of one Checkpointer saving the MLP's state `saves` times."""
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "ddp_mlp"))
    import train as ex

    from perdure.runtime import Checkpointer

    torch.manual_seed(0)
    model = ex.build_model(hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(16, ex.FEATURES)).sum().backward()
    opt.step()
    held, cpu, other = [], [], []
    with tempfile.TemporaryDirectory() as d:
        ckpt = Checkpointer(d, keep=2)
        for step in range(saves):
            c, t, p = time.thread_time(), time.perf_counter(), time.process_time()
            ckpt.save(step, {"model": model, "optim": opt, "step": step})
            held.append(time.perf_counter() - t)
            cpu.append(time.thread_time() - c)
            ckpt.wait()
            other.append(time.process_time() - p - (time.thread_time() - c))
            opt.step()
        ckpt.close()
    return {k: statistics.median(v[10:]) * 1000
            for k, v in (("held", held), ("cpu", cpu), ("other", other))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--saves", type=int, default=60)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--before-src", help="other perdure sources to compare with")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(args.saves, args.hidden)))
        return
    trees = {"this tree": os.environ.get("PYTHONPATH", "")}
    if args.before_src:
        trees["before"] = str(Path(args.before_src).absolute())
    print(f"$ {' '.join(sys.argv)}  (load {os.getloadavg()[0]:.1f})")
    got: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.reps):
        for name, path in trees.items():
            env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
            out = subprocess.run([sys.executable, __file__, "--child", "--saves",
                                  str(args.saves), "--hidden", str(args.hidden)], env=env,
                                 capture_output=True, text=True, check=True, timeout=600)
            got[name].append(json.loads(out.stdout.splitlines()[-1]))
    print(f"{'sources':<12} {'save() held, ms':>16} {'its CPU, ms':>12} "
          f"{'other threads CPU/save, ms':>27}   (median of {args.reps} runs' medians)")
    for name, runs in got.items():
        cells = [statistics.median(r[k] for r in runs) for k in ("held", "cpu", "other")]
        print(f"{name:<12} {cells[0]:16.2f} {cells[1]:12.2f} {cells[2]:27.2f}")


if __name__ == "__main__":
    main()
