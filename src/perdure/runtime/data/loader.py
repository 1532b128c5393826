"""ElasticLoader: a DataLoader whose state counts the batches the training loop received.

Workers prefetch, so the sampler's position runs ahead of the loop; counting the batches
handed out makes a state taken after k batches resume at batch k+1.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data import default_collate as _default_collate

from perdure.runtime.data.batching import (
    EmptyAwareCollate,
    SeededDataset,
    TagCollate,
    WorkerInit,
)
from perdure.runtime.data.sampler import ElasticSampler
from perdure.runtime.data.shard_plan import shared_capacity, write_shared
from perdure.runtime.data.shards import ShardDataset

__all__ = ["ElasticLoader"]

HELD_BACK_MAX = 8  # batches a reading-ahead loop may hold: Lightning holds 1
# Without workers, up to this many batches (and bytes) are fetched under one RNG state swap.
READ_AHEAD_MAX, READ_AHEAD_BYTES = 8, 1 << 20
_FORBIDDEN = ("batch_sampler", "sampler", "shuffle")


def _check_kwargs(kwargs: dict[str, Any], shards: bool) -> None:
    for key in _FORBIDDEN + (() if shards else ("batch_size", "drop_last")):
        if key in kwargs:
            owner = "ShardDataset" if shards else "the ElasticSampler"
            raise TypeError(f"ElasticLoader sets {key!r} itself from {owner}; do not pass it")
    if kwargs.get("in_order", True) is False:
        raise ValueError(
            "ElasticLoader needs in_order=True: its state counts batches in the order the "
            "sampler made them"
        )


def check_same_num_workers(num_workers: int) -> None:
    """Raise on every rank if the ranks' DataLoaders differ in num_workers (a collective)."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    counts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(counts, num_workers)
    if len(set(counts)) > 1:
        by_rank = ", ".join(f"rank {r}: {n}" for r, n in enumerate(counts))
        raise ValueError(
            f"every rank must use the same num_workers with a ShardDataset (shards are dealt "
            f"over ranks x workers), got {by_rank}; pass one num_workers on all ranks"
        )


class ElasticLoader:
    """Iterate a DataLoader whose `state_dict()` resumes at the next batch the loop would get.

    Map-style: `ElasticLoader(dataset, sampler, num_workers=..., ...)`; batch size, drop_last,
    seed and the world come from `sampler`. Shards: `ElasticLoader(shard_dataset,
    batch_size=...)`. Other keyword arguments go to `torch.utils.data.DataLoader`
    (`num_workers`, `prefetch_factor`, `persistent_workers`, `collate_fn`, `pin_memory`, ...).

    A rank whose share of an epoch's last global step is empty (fewer samples left than ranks)
    receives None for that step, so every rank runs the same number of steps.

    `prefetch` (map-style): called with the sample indices of the next `prefetch_batches`
    batches (0: off), e.g. `CachedVolume.prefetch`; by default the dataset's `prefetch` method.

    `read_ahead` (map-style, without worker processes): batches fetched at a time. None: up to
    READ_AHEAD_MAX within READ_AHEAD_BYTES (one with a `prefetch`); 1: one per `next()`, for
    samples that depend on the loop since the last batch. The batches are the same either way,
    and a collate_fn of your own runs at `next()`.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        sampler: ElasticSampler | None = None,
        *,
        prefetch: Callable[[Sequence[int]], Any] | None = None,
        prefetch_batches: int | None = None,
        check_workers: bool = True,
        read_ahead: int | None = None,
        **dataloader_kwargs: Any,
    ) -> None:
        if read_ahead is not None and (type(read_ahead) is not int or read_ahead < 1):
            raise ValueError(f"read_ahead is {read_ahead!r}; it must be an int >= 1, or None")
        self._read_ahead = read_ahead
        _check_kwargs(dataloader_kwargs, isinstance(dataset, ShardDataset))
        self.num_workers = int(dataloader_kwargs.get("num_workers", 0))
        user_collate = dataloader_kwargs.pop("collate_fn", None)
        self._init = WorkerInit(0, dataloader_kwargs.pop("worker_init_fn", None))
        # An iterator stops counting once a newer one is made or the position moves.
        self._iteration = 0
        self._moves = 0
        self._dataset: ShardDataset[Any] | None = None
        # Shards: how to step back over the last batches handed out (state_dict(held_back))
        self._undo: deque[tuple[int, int, int, int]] = deque(maxlen=HELD_BACK_MAX)
        self._cursors: deque[int] = deque(maxlen=HELD_BACK_MAX)  # map-style: the same
        if isinstance(dataset, ShardDataset):
            if sampler is not None:
                raise TypeError("a ShardDataset deals its own shards; do not pass a sampler")
            self._setup_shards(dataset, user_collate, dataloader_kwargs, check_workers)
            return
        if not isinstance(sampler, ElasticSampler):
            raise TypeError(
                f"ElasticLoader over a map-style dataset needs an ElasticSampler, got {sampler!r}"
            )
        if prefetch is None and callable(getattr(dataset, "prefetch", None)):
            prefetch = dataset.prefetch  # type: ignore[attr-defined]
        if prefetch_batches is None:  # reach past what the DataLoader itself has in flight
            in_flight = int(dataloader_kwargs.get("prefetch_factor") or 2) * self.num_workers
            prefetch_batches = max(4, 2 * in_flight)
        self._prefetch = prefetch if prefetch_batches > 0 else None
        self._prefetch_batches = prefetch_batches
        self.sampler = sampler
        self._epoch, self._cursor = sampler.epoch, sampler.cursor
        collate = EmptyAwareCollate(user_collate or _default_collate)
        self._make_loader(SeededDataset(dataset, sampler.seed), sampler.seed, collate,
                          dataloader_kwargs, batch_sampler=sampler)

    def _make_loader(self, dataset: Dataset[Any], seed: int, collate: Callable[[Any], Any],
                     kwargs: dict[str, Any], **more: Any) -> None:
        self._init.seed = seed
        self.dataloader = DataLoader(
            dataset,
            collate_fn=collate,
            worker_init_fn=self._init,
            generator=kwargs.pop("generator", None) or torch.Generator().manual_seed(seed),
            **more,
            **kwargs,
        )

    def _setup_shards(
        self,
        dataset: ShardDataset[Any],
        user_collate: Callable[[Any], Any] | None,
        kwargs: dict[str, Any],
        check_workers: bool,
    ) -> None:
        if check_workers:
            check_same_num_workers(self.num_workers)
        self._dataset = dataset
        dataset._num_workers = self.num_workers
        dataset._tagging = True
        if self.num_workers > 0:
            size = shared_capacity(len(dataset.shards), self.num_workers)
            dataset._shared = torch.zeros(size, dtype=torch.int64)
            dataset._shared.share_memory_()  # type: ignore[no-untyped-call]
        batched = kwargs.get("batch_size", 1) is not None
        self._make_loader(dataset, dataset.seed, TagCollate(user_collate, batched), kwargs)

    @property
    def over_shards(self) -> bool:
        """Whether this loader reads a ShardDataset (no length; it deals its own shards)."""
        return self._dataset is not None

    @property
    def epoch(self) -> int:
        """The epoch being (or about to be) iterated."""
        return self._dataset.epoch if self._dataset is not None else self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning; the current epoch again keeps its position."""
        if self._dataset is not None:
            self._dataset.set_epoch(epoch)
        elif epoch != self._epoch:
            self.sampler.set_epoch(epoch)
            self._epoch, self._cursor = epoch, 0
        self._moves += 1  # an iterator of the old epoch stops counting

    def state_dict(self, held_back: int = 0) -> dict[str, Any]:
        """The position after the batches the loop received: the sampler's or the dataset's
        state format, plain values only. `held_back`: that many of the batches handed out were
        not trained on yet (a loop that reads ahead, as Lightning does over a loader without a
        length): the position before them (at most HELD_BACK_MAX)."""
        if not 0 <= held_back <= HELD_BACK_MAX:
            raise ValueError(f"held_back must be 0..{HELD_BACK_MAX}, got {held_back}")
        handed_out = len(self._undo if self._dataset is not None else self._cursors)
        if held_back > handed_out:
            raise ValueError(f"held_back={held_back}: only {handed_out} batches of "
                             "this epoch were handed out")
        if self._dataset is not None:
            return self._shard_state(self._dataset, held_back)
        state = self.sampler.state_dict()
        state["epoch"] = self._epoch
        state["cursor"] = self._cursors[-held_back] if held_back else self._cursor
        return state

    def _shard_state(self, dataset: ShardDataset[Any], held_back: int) -> dict[str, Any]:
        state = dataset.state_dict()
        if held_back == 0:
            return state
        streams = state["streams"] = {k: list(v) for k, v in state["streams"].items()}
        for stream, done, offset, next_stream in list(self._undo)[-held_back:][::-1]:
            streams["done"][stream], streams["offset"][stream] = done, offset
            state["next_stream"] = next_stream
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict()` output (on any world size; shards: see ShardDataset).

        An iterator already advanced stops; one made but not yet advanced starts here (as
        Lightning makes its iterator before it restores a loader's state)."""
        self._moves += 1
        if self._dataset is not None:
            self._dataset.load_state_dict(state)
            return
        self.sampler.load_state_dict(state)
        self._epoch, self._cursor = self.sampler.epoch, self.sampler.cursor

    def __len__(self) -> int:
        if self._dataset is not None:
            raise TypeError("a ShardDataset's number of batches is not known in advance")
        self._follow_sampler()
        return self.sampler.steps_left(self._cursor)

    def _follow_sampler(self) -> None:
        """Follow a sampler whose epoch was set directly (as Lightning does): from its start."""
        if self.sampler.epoch != self._epoch:
            self._epoch, self._cursor = self.sampler.epoch, 0

    def __iter__(self) -> Iterator[Any]:
        self._iteration += 1
        if self._dataset is not None:
            return self._iter_shards(self._dataset, self._iteration)
        return self._iter_map(self._iteration)

    def _current(self, token: int, moves: int) -> bool:
        return token == self._iteration and moves == self._moves

    def _iter_map(self, token: int) -> Iterator[Any]:
        moves = self._moves  # read at the first next(): the position as the iterator starts
        sampler = self.sampler
        self._follow_sampler()
        sampler.set_position(self._epoch, self._cursor)  # drop what workers ran ahead for
        rank, world_size = sampler.world()
        start, epoch = self._cursor, self._epoch
        self._cursors.clear()
        self._init.epoch, self._init.rank = epoch, rank
        steps = sampler.steps_left(start, world_size)
        span = world_size * sampler.batch_size

        def request(first: int, stop: int) -> None:  # prefetch the samples of these steps
            if self._prefetch is not None:
                indices = [i for step in range(first, min(stop, steps))
                           for i in sampler.indices(start + step * span, rank, world_size)]
                if indices:
                    self._prefetch(indices)

        request(0, self._prefetch_batches)
        for received, batch in enumerate(self._map_batches(), start=1):
            if not self._current(token, moves):
                return
            self._cursors.append(self._cursor)
            self._cursor = sampler.cursor_after(start, received, world_size)
            request(received + self._prefetch_batches - 1, received + self._prefetch_batches)
            yield batch
        if self._current(token, moves) and self._epoch == epoch:
            self._cursor = sampler.num_samples

    def _map_batches(self) -> Iterator[Any]:
        """The DataLoader's batches; without workers or pinning, fetched here a group at a time."""
        loader = self.dataloader
        if loader.num_workers > 0 or loader.pin_memory:
            yield from loader
            return
        dataset, collate = loader.dataset, loader.collate_fn
        assert isinstance(dataset, SeededDataset)
        batches = iter(self.sampler)
        first = next(batches, None)
        if first is None:
            return
        data = collate(dataset.__getitems__(first))  # type: ignore[misc]
        ahead = self._ahead(data)  # from the first batch's size
        yield data
        while group := list(islice(batches, ahead)):
            got: Iterable[list[Any]] | None = dataset.fetch_ahead(group) if len(group) > 1 else None
            if got is None:  # one at a time: an error is raised at its own batch
                got = (dataset.__getitems__(batch) for batch in group)
            for samples in got:
                yield collate(samples)  # type: ignore[misc]

    def _ahead(self, batch: Any) -> int:
        """How many batches like `batch` to fetch at a time (`read_ahead`)."""
        if self._read_ahead is not None:
            return self._read_ahead
        if self._prefetch is not None:
            return 1  # the fetches would run past the batches it was asked to prefetch
        size = _nbytes(batch)
        if size is None:
            return 1
        return max(1, min(READ_AHEAD_MAX, READ_AHEAD_BYTES // max(size, 1)))

    def _iter_shards(self, dataset: ShardDataset[Any], token: int) -> Iterator[Any]:
        moves = self._moves
        plan = dataset.plan()
        self._undo.clear()
        self._init.epoch, self._init.rank = plan.epoch, plan.rank
        if dataset._shared is not None:
            write_shared(dataset._shared, plan)  # before iter(): workers read it on reset
        for tagged in self.dataloader:
            if not self._current(token, moves):
                return
            stream = plan.streams[tagged.stream]
            self._undo.append((tagged.stream, stream.done, stream.offset, plan.next_stream))
            stream.done, stream.offset = tagged.done, tagged.offset
            plan.next_stream = (tagged.stream + 1) % len(plan.streams)
            yield tagged.item
        if self._current(token, moves):
            for stream in plan.streams:
                stream.finish()  # includes a last partial batch that drop_last dropped


def _nbytes(batch: Any) -> int | None:
    """The bytes a collated batch holds; None when a part's size is unknown."""
    if isinstance(batch, torch.Tensor):
        return batch.nelement() * batch.element_size()
    if isinstance(batch, np.ndarray):
        return int(batch.nbytes)
    if isinstance(batch, (str, bytes)):
        return len(batch)
    if batch is None or isinstance(batch, (int, float, bool)):
        return 8
    if not isinstance(batch, (tuple, list, dict)):
        return None
    sizes = [_nbytes(part) for part in (batch.values() if isinstance(batch, dict) else batch)]
    return None if None in sizes else sum(s for s in sizes if s is not None)

