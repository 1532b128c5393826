"""The 2-replica DDP loop, bare and with perdure alternating in one run: what perdure adds.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/alternate.py [--pairs 30] [--phase 200]

bench/overhead.py runs each variant as its own torchrun job; on this shared 2-core VM the bare
loop's own speed moves 2-4x from one job to the next (where the scheduler puts two busy ranks
and their threads, and whatever else runs), so ratios of separate jobs spread 0.4-1.7 and cannot
show a 5% difference. Here ONE job of 2 ranks runs phases of `--phase` steps that alternate:
- bare: torch's DataLoader + DistributedSampler, nothing else;
- perdure: ElasticSampler + ElasticLoader, `goodput.step` around the step and
  `ckpt.maybe_save(step, state)` every step with `SavePolicy(every_steps=100)`, placed so that
  a phase of 200 steps saves twice, 50 steps before its end at the latest (the background
  persist of a save finishes inside the phase that made it).
Both phases train the same model with the same optimizer (the data differs only in order). The
job starts with `perdure.init()`, which installs handlers and adds no per-step work. Figure: each
perdure phase's wall time over the mean of the bare phases either side of it (a slow drift of
the machine cancels), median over the pairs, with its spread; rank 0's CPU the same way.
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

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_mlp"
SAMPLES, BATCH, EVERY = 4000, 16, 100
# and, for attribution: "process" (the saves persist in a process), "normal-priority" (the
# persist thread is not lowered)
FEATURES = ("loader", "goodput", "save")


class _Batches:
    """Endless batches from a loader, epoch after epoch (`epochs` sets each epoch)."""

    def __init__(self, loader: Any, epochs: Any) -> None:
        self.loader, self.epochs, self.epoch = loader, epochs, 0
        self.it = self._fresh()

    def _fresh(self) -> Any:
        self.epochs.set_epoch(self.epoch)
        return iter(self.loader)

    def next(self) -> Any:
        batch = next(self.it, None)
        if batch is None:
            self.epoch += 1
            self.it = self._fresh()
            batch = next(self.it)
        return batch


def worker(args: argparse.Namespace) -> None:
    """Rank k of the job: alternate bare and perdure phases; rank 0 writes one line a phase."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    sys.path.insert(0, str(EXAMPLE))
    import train as ex

    import perdure
    from perdure.runtime import Checkpointer, ElasticLoader, ElasticSampler, SavePolicy, goodput

    perdure.init(seed=0)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    data = ex.Samples(SAMPLES, seed=1)
    model = ex.build_model(args.hidden)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3)
    plain = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, seed=0))
    elastic = ElasticLoader(data, ElasticSampler(len(data), BATCH, seed=0))
    on = set(args.features.split(","))
    sources = {"bare": _Batches(plain, plain.sampler),
               "perdure": _Batches(elastic, elastic) if "loader" in on else None}
    if "normal-priority" in on:  # attribution: the persist thread keeps training's priority
        import perdure.runtime.checkpoint.worker as worker_threads

        worker_threads.lower_this_thread = lambda: None  # type: ignore[assignment]
    ckpt = Checkpointer(args.ckpt, keep=2, policy=SavePolicy(every_steps=args.every),
                        persist="process" if "process" in on else "thread")

    def step(batch: Any) -> None:
        _, x, y = batch
        loss = nn.functional.mse_loss(ddp(x), y, reduction="sum") / BATCH
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()

    out = open(args.out, "a") if dist.get_rank() == 0 else None  # noqa: SIM115
    done = 0  # perdure steps so far; saves fall at done + every // 2 = multiples of every
    for phase in range(2 * args.pairs + 1 + 2):  # two warm-up phases first
        kind = "perdure" if phase % 2 else "bare"
        source = sources[kind] or sources["bare"]
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.phase):
            batch = source.next()
            if kind == "bare":
                step(batch)
                continue
            done += 1
            if "goodput" in on:
                with goodput.step(done):
                    step(batch)
            else:
                step(batch)
            if "save" in on:
                ckpt.maybe_save(done + args.every // 2, {"model": model, "optim": opt,
                                                    "data": elastic, "step": done})
        if out is not None:
            out.write(json.dumps({"phase": phase, "kind": kind, "t": time.perf_counter() - t0,
                                  "cpu": time.process_time() - c0}) + "\n")
            out.flush()
    ckpt.close()
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def report(lines: list[dict[str, Any]], steps: int, saves: int) -> None:
    """Each perdure phase against the mean of the bare phases beside it; with ``saves`` per
    phase, also what each save cost rank 0 in wall time: the phase's excess over the bare
    phases beside it, divided by its saves."""
    phases = [r for r in lines if r["phase"] >= 2]
    rows: dict[str, list[float]] = {"t": [], "cpu": []}
    excess: list[float] = []
    for i in range(1, len(phases) - 1):
        if phases[i]["kind"] != "perdure":
            continue
        for key, got in rows.items():
            beside = (phases[i - 1][key] + phases[i + 1][key]) / 2
            got.append(phases[i][key] / beside)
            if key == "t":
                excess.append(phases[i][key] - beside)
    bare = [r["t"] / steps * 1000 for r in phases if r["kind"] == "bare"]
    print(f"bare phases: {statistics.median(bare):.2f} ms/step (median; "
          f"{min(bare):.2f}-{max(bare):.2f})")
    for key, label in (("t", "wall"), ("cpu", "rank 0 CPU")):
        got = sorted(rows[key])
        quart = (got[len(got) // 4], got[(3 * len(got)) // 4])
        print(f"perdure x bare, {label:<10}: median {statistics.median(got):.3f}  "
              f"(middle half {quart[0]:.3f}-{quart[1]:.3f}, all {got[0]:.3f}-{got[-1]:.3f}, "
              f"{len(got)} pairs)")
    if saves:
        per = sorted(e / saves * 1000 for e in excess)
        print(f"wall per save (phase excess / {saves} saves): median {statistics.median(per):.2f}"
              f" ms (middle half {per[len(per) // 4]:.2f}-{per[(3 * len(per)) // 4]:.2f})")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode")
    w = sub.add_parser("worker")
    w.add_argument("--out", required=True)
    w.add_argument("--ckpt", required=True)
    for q in (p, w):
        q.add_argument("--pairs", type=int, default=30, help="perdure phases measured")
        q.add_argument("--phase", type=int, default=2 * EVERY, help="steps per phase")
        q.add_argument("--every", type=int, default=EVERY,
                       help="steps between saves (fewer than 100 magnifies a save's cost, "
                            "for attribution)")
        q.add_argument("--hidden", type=int, default=64, help="the MLP's width")
        q.add_argument("--switch-interval", type=float, default=0.0,
                       help="sys.setswitchinterval in the ranks (attribution: GIL hand-offs)")
        q.add_argument("--features", default=",".join(FEATURES),
                       help="what the perdure phases use, of " + ",".join(FEATURES))
    args = p.parse_args(argv)
    if args.mode == "worker":
        worker(args)
        return
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-alternate-"))
    print(f"$ {' '.join(sys.argv)}  (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})",
          flush=True)
    out = root / "phases.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           "--nproc-per-node=2", str(Path(__file__)), "worker", "--out", str(out), "--ckpt",
           str(root / "ckpt"), "--pairs", str(args.pairs), "--phase", str(args.phase),
           "--hidden", str(args.hidden), "--features", args.features, "--every", str(args.every),
           "--switch-interval", str(args.switch_interval)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PERDURE_REPORT_DIR": str(root)}
    with (root / "log").open("wb") as log:
        subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True,
                       timeout=3600)
    report([json.loads(line) for line in out.read_text().splitlines()], args.phase,
           args.phase // args.every if "save" in args.features.split(",") else 0)
    print(f"(load {os.getloadavg()[0]:.1f} at the end; run under {root})")


if __name__ == "__main__":
    main()
