"""Fault-free overhead: the same 4-rank DDP loop bare under torchrun, then with each perdure
feature switched on, then examples/ddp_mlp itself; every figure a ratio to the bare loop
measured in the same run.

    flock /tmp/perdure-bench.lock .venv/bin/python bench/overhead.py [--steps 400] [--reps 3]

Every variant runs under `torchrun --standalone --nproc-per-node 4` (OMP_NUM_THREADS=1), the
model and data of examples/ddp_mlp (MLP with dropout, AdamW, batch 16 per rank). Rank 0
stamps the end of every step; the figure is the mean iteration time over the steps after the
first `--warmup` (everything the loop does counts: data, update, reports, agreement, saves).
Variants, each adding one feature to the one before:
- bare: dist.init_process_group + DistributedSampler/DataLoader (the plain torchrun loop);
- init: perdure.init() instead of init_process_group;
- loader: ElasticSampler + ElasticLoader instead of DistributedSampler;
- goodput: each step inside goodput.step (reports to a file, as under perdure);
- vote: the preemption agreement, `perdure.runtime.StopVote` (overlapped all-reduce);
- vote-blocking: the same agreement as a blocking all-reduce per step (what the example did);
- ckpt: an async perdure Checkpointer save every `--every` steps (model, optimizer, loader);
- example: examples/ddp_mlp/train.py as users copy it (ledger and RNG in the checkpoint).
Runs are interleaved (variant order rotated per repetition) so drift in the machine's load
spreads over all of them; the spread over repetitions is printed.
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
REPLICAS, SAMPLES, BATCH = 4, 4000, 16
FEATURES = ("init", "loader", "goodput", "vote", "ckpt")
VARIANTS: dict[str, list[str]] = {
    "bare": [],
    "init": ["init"],
    "loader": ["init", "loader"],
    "goodput": ["init", "loader", "goodput"],
    "vote": ["init", "loader", "goodput", "vote"],
    "vote-blocking": ["init", "loader", "goodput", "vote-blocking"],
    "ckpt": ["init", "loader", "goodput", "vote", "ckpt"],
}


# ---- the worker (runs under torchrun) -----------------------------------------------------

def _stamp(fd: int | None, step: int) -> None:
    if fd is not None:
        os.write(fd, (json.dumps({"step": step, "t": time.perf_counter()}) + "\n").encode())


def worker(args: argparse.Namespace) -> None:
    """One variant of the loop; rank 0 appends a line per finished step to --timeline."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, str(EXAMPLE))
    import train as ex

    on = set(args.features.split(",")) if args.features else set()
    if "init" in on:
        import perdure

        ctx = perdure.init(seed=0)
        rank = ctx.rank
    else:
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        torch.manual_seed(0)
    data = ex.Samples(SAMPLES, seed=1)
    model = ex.build_model(64)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3)
    loader: Any
    if "loader" in on:
        from perdure.runtime import ElasticLoader, ElasticSampler

        loader = ElasticLoader(data, ElasticSampler(len(data), BATCH, seed=0))
    else:
        from torch.utils.data import DataLoader, DistributedSampler

        loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, seed=0))
    from perdure.runtime import StopVote, goodput

    vote = StopVote() if "vote" in on else None
    ckpt: Any = None
    if "ckpt" in on:
        from perdure.runtime import Checkpointer

        ckpt = Checkpointer(args.ckpt, keep=2)
    fd = os.open(args.timeline, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) \
        if rank == 0 else None
    step, epoch = 0, 0
    while step < args.steps:
        if "loader" in on:
            loader.set_epoch(epoch)
        else:
            loader.sampler.set_epoch(epoch)
        for batch in loader:
            if step >= args.steps:
                break
            with goodput.step(step + 1) if "goodput" in on else _null():
                _, x, y = batch
                loss = nn.functional.mse_loss(ddp(x), y, reduction="sum") / BATCH
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                step += 1
                if vote is not None and vote.poll(False):
                    break
                if "vote-blocking" in on:
                    flag = torch.tensor([0])
                    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                    bool(flag.item())
            if ckpt is not None and step % args.every == 0:
                ckpt.save(step, {"model": model, "optim": opt, "data": loader, "step": step})
            _stamp(fd, step)
        epoch += 1
    if ckpt is not None:
        ckpt.wait()
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ---- driving ------------------------------------------------------------------------------

def _torchrun(script: list[str], env: dict[str, str], log: Path) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           f"--nproc-per-node={REPLICAS}", *script]
    with log.open("wb") as out:
        subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, check=True,
                       timeout=600)


def _mean_step(timeline: Path, warmup: int, key: str = "step") -> float:
    recs = [json.loads(line) for line in timeline.read_text().splitlines() if line.strip()]
    steps = [r for r in recs if key in r]  # the example also marks its start-up phases
    ts = [r["t"] for r in sorted(steps, key=lambda r: r[key]) if r[key] > warmup]
    return (ts[-1] - ts[0]) / (len(ts) - 1)


def run_variant(name: str, root: Path, args: argparse.Namespace) -> float:
    d = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    timeline = d / "timeline.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PERDURE_REPORT_DIR": str(d / "reports")}
    (d / "reports").mkdir()
    if name == "example":
        epochs = -(-args.steps * BATCH * REPLICAS // SAMPLES)
        script = [str(EXAMPLE / "train.py"), "--epochs", str(epochs), "--samples",
                  str(SAMPLES), "--log-every", "1000000", "--checkpoint-dir", str(d / "ckpt"),
                  "--checkpoint-every", str(args.every), "--timeline", str(timeline)]
        _torchrun(script, env, d / "log")
        # The example's timeline stamps wall time: same figure (time between step ends).
        return _mean_step(timeline, args.warmup)
    script = [str(Path(__file__)), "worker", "--features", ",".join(VARIANTS[name]),
              "--steps", str(args.steps), "--timeline", str(timeline), "--ckpt",
              str(d / "ckpt"), "--every", str(args.every)]
    _torchrun(script, env, d / "log")
    return _mean_step(timeline, args.warmup)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode")
    w = sub.add_parser("worker", help="the loop, run under torchrun")
    w.add_argument("--features", default="")
    w.add_argument("--timeline", required=True)
    w.add_argument("--ckpt", required=True)
    for q in (p, w):
        q.add_argument("--steps", type=int, default=400)
        q.add_argument("--every", type=int, default=20, help="checkpoint every N steps")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=30, help="steps not counted")
    p.add_argument("--variants", default=",".join([*VARIANTS, "example"]))
    args = p.parse_args(argv)
    if args.mode == "worker":
        worker(args)
        return
    names = args.variants.split(",")
    if names[0] != "bare":
        raise SystemExit("--variants must start with bare: every figure is a ratio to it")
    print(f"$ {' '.join(sys.argv)}  (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})",
          flush=True)
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-overhead-"))
    times: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(args.reps):
        order = names[rep % len(names):] + names[: rep % len(names)]
        for name in order:
            times[name].append(run_variant(name, root, args))
            print(f"  rep {rep + 1} {name:<14} {times[name][-1] * 1000:7.2f} ms/step "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    # Ratios per repetition (variants of one repetition ran close in time), then their median.
    print(f"\n{'variant':<14} {'ms/step':>8} {'x bare':>7} {'spread of x bare':>18}")
    for name in names:
        ratios = [t / b for t, b in zip(times[name], times["bare"], strict=True)]
        print(f"{name:<14} {statistics.median(times[name]) * 1000:8.2f} "
              f"{statistics.median(ratios):7.3f} {min(ratios):8.3f} .. {max(ratios):.3f}")
    print(f"runs under {root}")


if __name__ == "__main__":
    main()
