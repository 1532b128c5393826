"""A small DDP (gloo) training job: an MLP on synthetic regression data.

Run it under perdure (`perdure run examples/ddp_mlp/job.yaml`) or by hand with torchrun; it
reads the torchrun environment through `perdure.init()`.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import perdure


def make_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 32, generator=g)
    w = torch.randn(32, 1, generator=g)
    return x, x @ w + 0.1 * torch.randn(n, 1, generator=g)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step")
    args = p.parse_args()

    ctx = perdure.init(seed=0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    ddp = DDP(model) if ctx.world_size > 1 else model
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    x, y = make_data(4096, seed=1)
    print(f"{ctx.replica} rank {ctx.rank}/{ctx.world_size} restart {ctx.restart_count}",
          flush=True)
    for step in range(args.steps):
        lo = ((step * ctx.world_size + ctx.rank) * args.batch) % (len(x) - args.batch)
        loss = nn.functional.mse_loss(ddp(x[lo:lo + args.batch]), y[lo:lo + args.batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if args.step_time:
            time.sleep(args.step_time)
        if ctx.should_stop:  # a notice (preemption, restart round): leave promptly
            print(f"notice received at step {step}; exiting", flush=True)
            ctx.exit_suspended()
    if ctx.world_size > 1:
        dist.barrier()
    print("done", flush=True)
    ctx.finish(0)


if __name__ == "__main__":
    main()
