"""What ElasticLoader hands the DataLoader: the dataset wrapper that fetches each batch under
its own seed, the collate functions and the workers' start-up seeding.

Side effects: SeededDataset reseeds the CPU generators around each batch that draws (and
restores the training loop's states in the main process); WorkerInit seeds a worker process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.utils.data import Dataset
from torch.utils.data import default_collate as _default_collate
from torch.utils.data import default_convert as _default_convert

from perdure.runtime import compat
from perdure.runtime.data.cpu_states import (
    Watch,
    capture,
    restore,
    seed_generators,
    watchable,
)
from perdure.runtime.data.sampler import Batch
from perdure.runtime.data.seeding import batch_seed, in_worker, worker_seed
from perdure.runtime.data.shard_plan import Tagged
from perdure.runtime.rng import seed_cpu_generators

__all__ = ["EmptyAwareCollate", "SeededDataset", "TagCollate", "TaggedBatch", "WorkerInit"]


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
    """Wraps a map-style dataset: each batch is fetched under its own seed.

    In the main process, seeding costs the training loop ~65 us a batch (bench/loader_step.py:
    swapping three generators' states in and out, cold in cache right after a step), and most
    datasets draw nothing. So the first batch is fetched seeded and watched: a dataset that
    did not draw has its later batches fetched as they are, each watched (`Watch`: a few bytes
    of each generator's state before and after), and the first batch that drew is fetched
    again, seeded, its draws undone; from then on every batch is seeded. A batch that drew
    nothing is what a seeded fetch gives, so what a run trains on is the same either way. (The
    first drawing batch of a dataset that draws only sometimes is fetched twice; a dataset
    whose data depends on the generators' states without drawing from them, e.g. on
    `torch.initial_seed()`, sees the training loop's states instead of the batch's.)
    """

    def __init__(self, dataset: Dataset[Any], seed: int) -> None:
        self.dataset, self.seed = dataset, seed
        self.draws: bool | None = None  # None: not known yet
        self._watch = Watch()

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        if not isinstance(indices, Batch):
            return self._fetch(list(indices))
        if in_worker():
            seed_cpu_generators(batch_seed(self.seed, indices.epoch, indices.cursor,
                                           indices.rank))
            return self._fetch(list(indices))
        if self.draws is False:
            outer = self._watch.before()
            try:
                got = self._fetch(list(indices))
            except BaseException:
                if self._watch.drew():  # a loop that skips a failed batch keeps its stream
                    restore(outer)
                raise
            if not self._watch.drew():
                return got
            restore(outer)  # it drew: its draws are undone and the batch fetched seeded
            self.draws = True
        return self._seeded(indices)

    def fetch_ahead(self, batches: list[Batch]) -> list[list[Any]] | None:
        """The samples of several batches, fetched back to back under one watch, for a dataset
        known to draw nothing (one watch costs a batch ~30 us right after a training step,
        bench/loader_step.py). None, the generators as they were before, when any fetch drew
        or raised: the caller then fetches the batches one by one (`__getitems__`), so each
        is seeded or raises exactly where it would have."""
        if self.draws is not False or in_worker():
            return None
        outer = self._watch.before()
        got: list[list[Any]] | None = None
        try:
            got = [self._fetch(list(batch)) for batch in batches]
        except Exception:
            pass  # fetched again one by one: the error is raised at its own batch
        finally:  # also on an interrupt: the loop's stream is left as it was
            drew = self._watch.drew()
            if drew:
                restore(outer)
        return None if drew else got

    def _seeded(self, indices: Batch) -> list[Any]:
        """Fetch under the batch's seed, the training loop's states put back after; the first
        time, also see whether the dataset drew."""
        seed = batch_seed(self.seed, indices.epoch, indices.cursor, indices.rank)
        saved = capture()
        try:
            seed_generators(seed)
            if self.draws is not None or not watchable():
                return self._fetch(list(indices))
            self._watch.before()
            got = self._fetch(list(indices))
            self.draws = self._watch.drew()
            return got
        finally:
            restore(saved)

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


class TaggedBatch:
    """A ShardDataset batch with its stream's position after it; ElasticLoader unwraps it."""

    def __init__(self, data: Any, stream: int, done: int, offset: int) -> None:
        self.data, self.stream, self.done, self.offset = data, stream, done, offset

    def pin_memory(self) -> TaggedBatch:
        """Pin the batch (DataLoader's pin_memory thread calls this)."""
        pinned = compat.pin_memory(self.data)
        return TaggedBatch(pinned, self.stream, self.done, self.offset)


class TagCollate:
    """Collate the samples of a ShardDataset batch and keep the position of the last one."""

    def __init__(self, collate: Callable[[Any], Any] | None, batched: bool) -> None:
        self.batched = batched
        self.collate = collate or (_default_collate if batched else _default_convert)

    def __call__(self, data: Any) -> TaggedBatch:
        last: Tagged = data[-1] if self.batched else data
        payload = self.collate([t.item for t in data] if self.batched else data.item)
        return TaggedBatch(payload, last.stream, last.done, last.offset)
