"""Token shards on "slow" storage, read through perdure's local file cache (CachedVolume).

`prepare` writes synthetic token shards (`shard-00000.npy`, int32, a fixed seed) once; the
training reads fixed windows of `seq + 1` tokens: sample i is window i % per_shard of shard
i // per_shard. A map-style dataset, so perdure's ElasticSampler orders it and keeps the exact
position (on any number of replicas); the shards are copied to the node-local cache on first
use and the next batches' shards are prefetched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from perdure.runtime import CachedVolume


def prepare(source: Path, shards: int, per_shard: int, seq: int, vocab: int) -> None:
    """Write the shards (atomically each; existing ones are kept)."""
    source.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1234)
    for i in range(shards):
        tokens = rng.integers(0, vocab, size=per_shard * (seq + 1), dtype=np.int32)
        path = source / f"shard-{i:05d}.npy"
        if path.exists():
            continue
        tmp = source / f".{path.name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            np.save(f, tokens)
        os.replace(tmp, path)


class TokenWindows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """(input tokens, next tokens) windows over the cached shards."""

    def __init__(self, source: Path, cache: Path, per_shard: int, seq: int) -> None:
        self.volume = CachedVolume(source, cache, read=_load)
        self.per_shard, self.seq = per_shard, seq

    def __len__(self) -> int:
        return len(self.volume) * self.per_shard

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        shard: Any = self.volume[i // self.per_shard]
        at = (i % self.per_shard) * (self.seq + 1)
        window = torch.from_numpy(np.array(shard[at: at + self.seq + 1], dtype=np.int64))
        return window[:-1], window[1:]

    def prefetch(self, indices: Any) -> None:
        """Copy the shards of upcoming samples into the cache ahead of use (ElasticLoader)."""
        self.volume.prefetch(sorted({int(i) // self.per_shard for i in indices}))


def _load(path: str) -> Any:
    return np.load(path, mmap_mode="r")
