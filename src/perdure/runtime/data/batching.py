"""What ElasticLoader hands the DataLoader: the per-batch seeding dataset wrapper, the collate
functions and the workers' start-up seeding (side effects: the CPU generators).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.utils.data import Dataset
from torch.utils.data import default_collate as _default_collate
from torch.utils.data import default_convert as _default_convert

from perdure.runtime import compat
from perdure.runtime.data.sampler import Batch
from perdure.runtime.data.seeding import batch_seed, capture, in_worker, restore, worker_seed
from perdure.runtime.rng import seed_cpu_generators

__all__ = ["EmptyAwareCollate", "SeededDataset", "TagCollate", "Tagged", "WorkerInit"]


class WorkerInit:
    """worker_init_fn: seed the worker from (seed, epoch, rank, worker), then the user's."""

    def __init__(self, seed: int, user_fn: Callable[[int], None] | None) -> None:
        self.seed, self.user_fn = seed, user_fn
        self.epoch, self.rank = 0, 0  # updated before each iter(), i.e. before workers start

    def __call__(self, worker_id: int) -> None:
        seed_cpu_generators(worker_seed(self.seed, self.epoch, self.rank, worker_id))
        if self.user_fn is not None:
            self.user_fn(worker_id)


class SeededDataset(Dataset[Any]):
    """Wraps a map-style dataset: each batch is fetched under its own seed."""

    def __init__(self, dataset: Dataset[Any], seed: int) -> None:
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        if not isinstance(indices, Batch):
            return self._fetch(list(indices))
        if in_worker():
            seed_cpu_generators(self._seed_of(indices))
            return self._fetch(list(indices))
        return self._fetch_seeded([indices])[0]

    def fetch_ahead(self, batches: list[Batch]) -> list[list[Any]] | None:
        """Several batches under one capture and restore; None when a fetch raised."""
        if in_worker():
            return None
        try:
            return self._fetch_seeded(batches)
        except Exception:
            return None

    def _fetch_seeded(self, batches: list[Batch]) -> list[list[Any]]:
        saved = capture()
        try:
            got = []
            for batch in batches:
                seed_cpu_generators(self._seed_of(batch))
                got.append(self._fetch(list(batch)))
            return got
        finally:  # also on an interrupt: the loop's stream is left as it was
            restore(saved)

    def _seed_of(self, batch: Batch) -> int:
        return batch_seed(self.seed, batch.epoch, batch.cursor, batch.rank)

    def _fetch(self, indices: list[int]) -> list[Any]:
        inner = getattr(self.dataset, "__getitems__", None)
        if inner is not None:
            return list(inner(indices))
        return [self.dataset[i] for i in indices]


class EmptyAwareCollate:
    """Collate, except that an empty batch (end of epoch, more ranks than samples) is None."""

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate

    def __call__(self, data: list[Any]) -> Any:
        return None if len(data) == 0 else self.collate(data)


class Tagged:
    """A ShardDataset sample (or batch) with its stream's position right after it."""

    def __init__(self, item: Any, stream: int, done: int, offset: int) -> None:
        self.item, self.stream, self.done, self.offset = item, stream, done, offset

    def pin_memory(self) -> Tagged:
        """Pin the batch (DataLoader's pin_memory thread calls this)."""
        return Tagged(compat.pin_memory(self.item), self.stream, self.done, self.offset)


class TagCollate:
    """Collate the samples of a ShardDataset batch and keep the position of the last one."""

    def __init__(self, collate: Callable[[Any], Any] | None, batched: bool) -> None:
        self.batched = batched
        self.collate = collate or (_default_collate if batched else _default_convert)

    def __call__(self, data: Any) -> Tagged:
        last: Tagged = data[-1] if self.batched else data
        payload = self.collate([t.item for t in data] if self.batched else data.item)
        return Tagged(payload, last.stream, last.done, last.offset)
