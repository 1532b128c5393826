"""Where a save's cost falls in a 2-rank DDP loop: each step timed by its place after a save.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/save_steps.py [--steps 3000] [--runs 2]

One 2-rank torchrun job per run and mode: examples/ddp_mlp's MLP and AdamW over torch's
DataLoader, `maybe_save` every step with `SavePolicy(every_steps=100)` ("save") or no
checkpointer call at all ("none"); the modes alternate. Rank 0 times each step (wall, and its
process's CPU: all threads, the persist thread's included). The figure: the median step by its
distance k from the last save (k = 0: the save's own step; 1-5; 6-30; 31-99), per mode, and the
mean step, after the first 300 steps. Then, per rank, the median CPU one save took from each
thread (SaveStats.extra: save() on the training thread; the persist thread's write, its rank 0
commit and retention, and its whole persist), the figures that count on a busy machine: CPU
there is taken from training, and Python work in the persist thread holds the GIL.

`--modes` runs attribution modes (bench/save_modes.py) beside "none" and "save", e.g.

    .venv/bin/python bench/save_steps.py --runs 3 \
        --modes save,no-persist,collectives-only,store-only

and then also prints, per run, each mode's excess over the "none" run of the same round in the
first 8 steps from a save (the median step at each distance k = 0..7, minus none's), and its sum:
what one save costs the steps around it, wherever on them it falls.
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
from typing import Any

import save_modes

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_mlp"
EVERY, BATCH = 100, 16
GROUPS = (("save's step", 0, 0), ("next 5", 1, 5), ("6-30", 6, 30), ("31-99", 31, 99))
CPU_KEYS = ("save_cpu_s", "write_cpu_s", "commit_cpu_s", "persist_cpu_s")


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    sys.path.insert(0, str(EXAMPLE))
    import train as ex

    import perdure
    from perdure.runtime import Checkpointer, SavePolicy

    perdure.init(seed=0)
    save_modes.install(args.mode)
    data = ex.Samples(4000, seed=1)
    model = ex.build_model(64)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3)
    loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, seed=0))
    ckpt = Checkpointer(args.ckpt, keep=2, policy=SavePolicy(every_steps=EVERY),
                        async_save=args.mode != "blocking")
    batches, epoch, steps, saves, last = iter(loader), 0, [], [], None
    for step in range(1, args.steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        batch = next(batches, None)
        if batch is None:
            epoch += 1
            loader.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
            batches = iter(loader)
            batch = next(batches)
        _, x, y = batch
        loss = nn.functional.mse_loss(ddp(x), y, reduction="sum") / BATCH
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        if args.mode != "none":
            ckpt.maybe_save(step, {"model": model, "optim": opt, "step": step})
        steps.append((step, time.perf_counter() - t0, time.process_time() - c0))
        if ckpt.last_save is not last:
            last = ckpt.last_save
            saves.append(last.extra)  # type: ignore[union-attr]
    ckpt.close()
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, saves)
    if dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps({"steps": steps, "saves": everyone}))
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def summary(steps: list[list[float]]) -> dict[str, Any]:
    kept = [s for s in steps if s[0] > 300]
    out: dict[str, Any] = {"mean": (statistics.mean(s[1] for s in kept),
                                    statistics.mean(s[2] for s in kept))}
    for label, lo, hi in GROUPS:
        group = [s for s in kept if lo <= int(s[0]) % EVERY <= hi]
        out[label] = (statistics.median(s[1] for s in group),
                      statistics.median(s[2] for s in group))
    return out


def excess(steps: list[list[float]], none: list[list[float]]) -> list[float]:
    """The median step at each distance k = 0..7 from a save, minus the same of `none`, in
    seconds (after the first 300 steps). No side effects."""
    def by_k(got: list[list[float]], k: int) -> float:
        return statistics.median(s[1] for s in got if s[0] > 300 and int(s[0]) % EVERY == k)

    return [by_k(steps, k) - by_k(none, k) for k in range(8)]


def cpu_cells(ranks: list[list[dict[str, float]]]) -> str:
    """Each rank's median CPU per save for CPU_KEYS, after the first 3 saves (the plan and
    the skeletons are made then); '-' where this version does not record it."""
    cells = []
    for saves in ranks:
        kept = saves[3:] or saves
        row = []
        for key in CPU_KEYS:
            got = [s[key] for s in kept if key in s]
            row.append(f"{statistics.median(got) * 1e3:5.2f}" if got else "    -")
        cells.append(" ".join(row))
    return " | ".join(cells)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode_")
    w = sub.add_parser("worker")
    w.add_argument("--mode", choices=save_modes.MODES, required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--ckpt", required=True)
    for q in (p, w):
        q.add_argument("--steps", type=int, default=3000)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--modes", default="save",
                   help="comma-separated modes besides none (bench/save_modes.py)")
    args = p.parse_args(argv)
    if args.mode_ != "worker":
        modes = ["none", *(m for m in args.modes.split(",") if m and m != "none")]
        unknown = [m for m in modes if m not in save_modes.MODES]
        if unknown:
            p.error(f"--modes: unknown {', '.join(unknown)}; known: {', '.join(save_modes.MODES)}")
    if args.mode_ == "worker":
        worker(args)
        return
    print(f"$ {' '.join(sys.argv)}  (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-save-steps-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PERDURE_REPORT_DIR": str(root)}
    cpu_lines: list[str] = []
    excess_lines: list[str] = []
    print(f"{'run':<10} {'mean step':>18}" + "".join(f" {g[0]:>18}" for g in GROUPS)
          + "   (wall / process CPU, ms)")
    for run in range(args.runs):
        for mode in modes:
            out = root / f"{mode}-{run}.json"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nnodes=1", "--nproc-per-node=2", str(Path(__file__)), "worker", "--mode",
                   mode, "--out", str(out), "--ckpt", str(root / f"ckpt-{run}-{mode}"),
                   "--steps", str(args.steps)]
            with (root / f"{mode}-{run}.log").open("wb") as log:
                subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True,
                               timeout=1800)
            found = json.loads(out.read_text())
            got = summary(found["steps"])
            cells = [got["mean"], *(got[g[0]] for g in GROUPS)]
            print(f"{mode + ' ' + str(run + 1):<10}"
                  + "".join(f" {w * 1e3:8.2f} / {c * 1e3:7.2f}" for w, c in cells), flush=True)
            if mode == "none":
                none = found["steps"]
                continue
            label = f"{mode + ' ' + str(run + 1):<22}"
            cpu_lines.append(label + cpu_cells(found["saves"]))
            ks = excess(found["steps"], none)
            excess_lines.append(label + " ".join(f"{e * 1e3:5.2f}" for e in ks)
                                + f"   sum {sum(ks) * 1e3:5.2f}")
    print(f"\nCPU per save, median, ms (rank 0 | rank 1): {', '.join(CPU_KEYS)}")
    print("\n".join(cpu_lines))
    print("\nexcess over none at k = 0..7 steps from a save, ms, and their sum")
    print("\n".join(excess_lines))
    print(f"(load {os.getloadavg()[0]:.1f} at the end; run under {root})")


if __name__ == "__main__":
    main()
