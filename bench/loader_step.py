"""What the data path adds to a short training step, in one process: a DataLoader with a
DistributedSampler against ElasticLoader, in alternating phases of the same loop.

    .venv/bin/python bench/loader_step.py [--phases 30] [--steps 400]

The step is the ddp_mlp example's MLP (no DDP: one process, one thread, so only the loader
differs; a step of ~0.4 ms magnifies what the loader costs right after a step, with its
caches cold). Variants, each a phase between bare ones:
- `elastic`: ElasticLoader over an ElasticSampler, as shipped (every batch under its own seed);
Figure: each variant's phase CPU time over the mean of the bare phases either side, median
over the phases; and that ratio's excess as microseconds per batch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "ddp_mlp"))
import train as ex
from alternate import Batches

from perdure.runtime import ElasticLoader, ElasticSampler

SAMPLES, BATCH, HIDDEN = 4000, 16, 64


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phases", type=int, default=30, help="phases of each variant")
    p.add_argument("--steps", type=int, default=400, help="steps per phase")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = ex.Samples(SAMPLES, seed=1)
    model = ex.build_model(HIDDEN)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    plain = DataLoader(data, batch_size=BATCH,
                       sampler=DistributedSampler(data, num_replicas=2, rank=0, seed=0))
    elastic = ElasticLoader(data, ElasticSampler(SAMPLES, BATCH, seed=0, rank=0, world_size=2))
    sources = {"bare": Batches(plain, plain.sampler), "elastic": Batches(elastic, elastic)}

    def phase(name: str) -> float:
        source = sources[name]
        began = time.process_time()
        for _ in range(args.steps):
            _, x, y = source.next()
            loss = nn.functional.mse_loss(model(x), y, reduction="sum") / BATCH
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
        return time.process_time() - began

    variants = ["elastic"]
    phase("bare")
    ratios: dict[str, list[float]] = {v: [] for v in variants}
    bare: list[float] = []
    before = phase("bare")
    for i in range(args.phases * len(variants)):
        name = variants[i % len(variants)]
        took = phase(name)
        after = phase("bare")
        ratios[name].append(took / ((before + after) / 2))
        bare += [before, after]
        before = after
    step_us = statistics.median(bare) / args.steps * 1e6
    print(f"bare step (CPU): {step_us:.0f} us (median)")
    for name, got in ratios.items():
        got.sort()
        med = statistics.median(got)
        print(f"{name:15s} x bare: median {med:.3f} (middle half {got[len(got) // 4]:.3f}-"
              f"{got[3 * len(got) // 4]:.3f}), {(med - 1) * step_us:.1f} us per batch")


if __name__ == "__main__":
    main()
