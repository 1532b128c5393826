"""Seeds for data loading that replay after a resume, and the process's world (rank, size).

Augmentations replay only if each unit of work (a batch, a shard, a worker's start) starts
from a seed independent of which worker ran it and what it ran before. In the main process
the loop's generator states are put back around the data work (`capture`, `restore`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import get_worker_info

from perdure.runtime.ranks import env_int
from perdure.runtime.rng import derive_seed, seed_cpu_generators

__all__ = [
    "CpuRngSlot",
    "batch_seed",
    "capture",
    "in_worker",
    "resolve_world",
    "restore",
    "shard_seed",
    "worker_seed",
]

CpuState = tuple[Any, Any, torch.Tensor]


def worker_seed(seed: int, epoch: int, rank: int, worker: int) -> int:
    """The seed a data worker process starts from: a pure function of its four inputs."""
    return derive_seed(seed, 1, epoch, rank, worker)


def batch_seed(seed: int, epoch: int, cursor: int, rank: int) -> int:
    """The seed for one rank's batch of the global step that starts at `cursor`."""
    return derive_seed(seed, 2, epoch, cursor, rank)


def shard_seed(seed: int, epoch: int, shard: int) -> int:
    """The seed for reading one shard in one epoch (independent of ranks and workers)."""
    return derive_seed(seed, 3, epoch, shard)


def in_worker() -> bool:
    """True inside a DataLoader worker process."""
    return get_worker_info() is not None


def capture() -> CpuState:
    """The CPU generators' states now (NumPy's cached Gaussian and Python's included)."""
    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def restore(state: CpuState) -> None:
    """Put back what `capture()` returned: the next draws repeat exactly."""
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])


class CpuRngSlot:
    """CPU generator states of their own, for a shard reader interleaved with the loop."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._state: CpuState | None = None
        self._worker = in_worker()
        if self._worker:
            seed_cpu_generators(seed)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` with this slot's generator states active."""
        if self._worker:
            return fn()
        outer = capture()
        try:
            if self._state is None:
                seed_cpu_generators(self._seed)
            else:
                restore(self._state)
            return fn()
        finally:
            self._state = capture()
            restore(outer)


def resolve_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world size): as given, else torch.distributed's, else RANK and WORLD_SIZE's."""
    if rank is None or world_size is None:
        if dist.is_available() and dist.is_initialized():
            found_rank, found_size = dist.get_rank(), dist.get_world_size()
        else:
            found_rank, found_size = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
        rank = found_rank if rank is None else rank
        world_size = found_size if world_size is None else world_size
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(
            f"rank must be in [0, world_size={world_size}), got {rank}; check RANK and WORLD_SIZE"
        )
    return rank, world_size
