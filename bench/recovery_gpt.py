"""bench/recovery.py's torchrun baseline on the GPT workload (`--workload gpt`).

examples/gpt's model (model.py: torch only) with the same FSDP2 sharding, trained on the same
token shards read straight from disk (no perdure import: a restarted torchrun worker pays for
torch and nothing else), saved with a synchronous stock DCP checkpoint every `--every` steps;
a LATEST file names the newest complete one and a restart resumes from it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GPT = ROOT / "examples" / "gpt"
# examples/gpt/train.py's defaults: batch 4 per rank, sequence 256, 8 shards of 64 sequences
BATCH, SEQ, VOCAB, SHARDS, PER_SHARD = 4, 256, 8192, 8, 64


def load_example(name: str) -> ModuleType:
    """One of examples/gpt's modules by path (bench/ has a data.py of its own)."""
    spec = importlib.util.spec_from_file_location(f"gpt_{name}", GPT / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def prepare(data: Path) -> None:
    """The token shards both systems train on (examples/gpt's own writer, its defaults)."""
    load_example("data").prepare(data, SHARDS, PER_SHARD, SEQ, VOCAB)


class Shards:
    """Sample i: window i % PER_SHARD of shard i // PER_SHARD, as examples/gpt reads it."""

    def __init__(self, data: Path) -> None:
        import numpy as np

        self.np = np
        self.shards = [np.load(p, mmap_mode="r") for p in sorted(data.glob("shard-*.npy"))]

    def batch(self, first: int) -> tuple[Any, Any]:
        import torch

        rows = []
        for i in range(first, first + BATCH):
            i %= len(self.shards) * PER_SHARD
            at = (i % PER_SHARD) * (SEQ + 1)
            rows.append(self.np.array(self.shards[i // PER_SHARD][at: at + SEQ + 1],
                                      dtype=self.np.int64))
        window = torch.from_numpy(self.np.stack(rows))
        return window[:, :-1], window[:, 1:]


def worker(args: argparse.Namespace) -> None:
    """FSDP2 GPT with a synchronous DCP checkpoint every N steps, resumed from LATEST."""
    import dcp_baseline
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    model_py = load_example("model")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = model_py.GPT(model_py.GPTConfig(vocab=VOCAB, seq=SEQ))
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = Shards(Path(args.data))
    ckpt = Path(args.ckpt)
    step = dcp_baseline.restore(model, opt, ckpt)
    fd = os.open(args.timeline, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) \
        if rank == 0 else None
    while True:
        began = time.perf_counter()
        loss = model(*data.batch((step * world + rank) * BATCH))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        float(loss.detach())
        step += 1
        if fd is not None:
            line = {"pid": os.getpid(), "step": step, "t": time.time(),
                    "s": time.perf_counter() - began}
            os.write(fd, (json.dumps(line) + "\n").encode())
        if step % args.every == 0:
            dcp_baseline.save(model, opt, ckpt, step, rank)
