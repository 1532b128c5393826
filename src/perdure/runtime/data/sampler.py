"""ElasticSampler: batches that resume exactly, on the same or a different world size.

The epoch's order is a pure function of (seed, epoch); the only state is a global cursor, the
samples of that order consumed this epoch. A global step takes the next W * B samples and rank
r takes positions r, r + W, ... of them, so a resume at cursor c on W' ranks splits order[c:]
the same way. A partial last step is split too (ranks past its end get an empty batch, so
every rank runs the same number of steps), or dropped on every rank with `drop_last`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from perdure.runtime.data.seeding import resolve_world
from perdure.runtime.rng import derive_seed

__all__ = ["Batch", "ElasticSampler"]

_STATE_VERSION = 1


class Batch(list[int]):
    """One rank's sample indices for one global step, with what its seed derives from."""

    def __init__(self, indices: list[int], epoch: int, cursor: int, rank: int) -> None:
        super().__init__(indices)
        self.epoch = epoch
        self.cursor = cursor
        self.rank = rank

    def __reduce__(self) -> tuple[Any, ...]:
        return (Batch, (list(self), self.epoch, self.cursor, self.rank))


def epoch_order(num_samples: int, seed: int, epoch: int) -> np.ndarray[Any, Any]:
    """One epoch's order of `range(num_samples)`, by NumPy's frozen legacy `RandomState`."""
    key = derive_seed(seed, 0, epoch)
    words = np.array([key & 0xFFFFFFFF, key >> 32], dtype=np.uint32)
    return np.random.RandomState(words).permutation(num_samples).astype(np.int64)


def _check_int(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


class ElasticSampler:
    """Yield this rank's micro-batch of each global step; resume exactly on any world size.

    Use it as a DataLoader `batch_sampler` (or through `ElasticLoader`, which also makes
    `state_dict()` count only the batches the training loop received). `rank` and
    `world_size` default to torch.distributed's, else RANK / WORLD_SIZE, and are read again at
    every `iter()` unless given, so a sampler follows an elastic membership change.
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self.num_samples = _check_int("num_samples", num_samples, 0)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.seed = _check_int("seed", seed, 0)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.set_world(rank, world_size)  # a bad world fails now, not at the first iter()
        self._epoch = 0
        self._cursor = 0
        self._order_cache: tuple[int, np.ndarray[Any, Any]] | None = None

    @property
    def epoch(self) -> int:
        """The epoch being (or about to be) iterated."""
        return self._epoch

    @property
    def cursor(self) -> int:
        """Samples of this epoch's order consumed so far, over all ranks."""
        return self._cursor

    def world(self) -> tuple[int, int]:
        """The (rank, world_size) the next `iter()` splits the epoch over."""
        return resolve_world(self._rank, self._world_size)

    def set_world(self, rank: int | None, world_size: int | None) -> None:
        """Pin (or with None, unpin) the rank and world size, e.g. after a membership change."""
        resolve_world(rank, world_size)
        self._rank, self._world_size = rank, world_size

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` at cursor 0; the current epoch again keeps its cursor (for resumes)."""
        _check_int("epoch", epoch, 0)
        if epoch != self._epoch:
            self._epoch = epoch
            self._cursor = 0

    def set_position(self, epoch: int, cursor: int) -> None:
        """Move to `cursor` samples into `epoch` (what `load_state_dict` does, without checks)."""
        _check_int("epoch", epoch, 0)
        _check_int("cursor", cursor, 0)
        if cursor > self.num_samples:
            raise ValueError(
                f"cursor {cursor} is past the end of an epoch of {self.num_samples} samples"
            )
        self._epoch, self._cursor = epoch, cursor

    def steps_left(self, cursor: int | None = None, world_size: int | None = None) -> int:
        """Global steps left in this epoch from `cursor` (default: the current one)."""
        cursor = self._cursor if cursor is None else cursor
        world_size = self.world()[1] if world_size is None else world_size
        step = world_size * self.batch_size
        remaining = self.num_samples - cursor
        if self.drop_last:
            return remaining // step
        return -(-remaining // step)

    def __len__(self) -> int:
        return self.steps_left()

    def cursor_after(self, start: int, steps: int, world_size: int) -> int:
        """The global cursor after `steps` global steps from `start` on `world_size` ranks."""
        if steps >= self.steps_left(start, world_size):
            return self.num_samples
        return start + steps * world_size * self.batch_size

    def order(self) -> np.ndarray[Any, Any]:
        """This epoch's sample order (identity when `shuffle=False`)."""
        if not self.shuffle:
            return np.arange(self.num_samples, dtype=np.int64)
        cached = self._order_cache
        if cached is None or cached[0] != self._epoch:
            cached = (self._epoch, epoch_order(self.num_samples, self.seed, self._epoch))
            self._order_cache = cached
        return cached[1]

    def indices(self, cursor: int, rank: int, world_size: int) -> list[int]:
        """Rank `rank`'s indices for the global step that starts at `cursor`."""
        end = min(cursor + world_size * self.batch_size, self.num_samples)
        if not self.shuffle:
            return list(range(cursor + rank, end, world_size))
        chunk: list[int] = self.order()[cursor + rank : end : world_size].tolist()
        return chunk

    def __iter__(self) -> Iterator[Batch]:
        rank, world_size = self.world()
        return self._batches(self._epoch, self._cursor, rank, world_size)

    def _batches(self, epoch: int, start: int, rank: int, world_size: int) -> Iterator[Batch]:
        steps = self.steps_left(start, world_size)
        for step in range(steps):
            if self._epoch != epoch:
                return  # set_epoch / load_state_dict moved on: this iterator is stale
            cursor = start + step * world_size * self.batch_size
            batch = Batch(self.indices(cursor, rank, world_size), epoch, cursor, rank)
            self._cursor = self.cursor_after(start, step + 1, world_size)
            yield batch
        if steps == 0 and self._epoch == epoch:
            self._cursor = self.num_samples  # only dropped samples were left

    def state_dict(self) -> dict[str, Any]:
        """The position as plain values: epoch and global cursor, plus what must match to load."""
        return {
            "version": _STATE_VERSION,
            "epoch": self._epoch,
            "cursor": self._cursor,
            "num_samples": self.num_samples,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "batch_size": self.batch_size,
            "world_size": self.world()[1],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict()` output, on this or any other world size or batch size."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(
                f"sampler state version {state.get('version')!r} is not supported "
                f"(expected {_STATE_VERSION}); pass what ElasticSampler.state_dict() returned"
            )
        for key in ("num_samples", "seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"sampler state has {key}={state[key]!r} but this sampler has "
                    f"{key}={getattr(self, key)!r}; the epoch order would differ and samples "
                    "would repeat or be skipped. Build the sampler with the saved value."
                )
        self.set_position(int(state["epoch"]), int(state["cursor"]))
