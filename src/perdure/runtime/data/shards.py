"""ShardDataset: stream samples from shards (files) and resume without replaying them.

Each epoch's shard order is a pure function of (seed, epoch), dealt by a global stride over
ranks x workers ("streams"): stream g of S reads order[g], order[g + S], ..., so every rank
must use the same `num_workers`. A partly read shard resumes by re-reading and dropping its
first `offset` samples, so `read_shard` must yield them in the same order every time.

State layout (plain values), per rank::

    {"version": 1, "kind": "rank", "seed", "epoch", "num_shards", "shuffle", "rank",
     "world_size", "num_workers", "next_stream",   # the stream whose batch comes next
     "streams": {"items": [[[shard, start], ...] per stream],  # its shards, in order
                 "done": [items finished, per stream],
                 "offset": [samples read of the current item, per stream]}}

and merged: {"version": 1, "kind": "merged", "seed", "epoch", "num_shards", "shuffle",
"completed": [shard, ...], "remaining": [[shard, samples already read], ...]}.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

import torch
from torch.utils.data import IterableDataset, get_worker_info

from perdure.runtime.data.batching import Tagged
from perdure.runtime.data.seeding import CpuRngSlot, resolve_world, shard_seed
from perdure.runtime.data.shard_plan import (
    STATE_VERSION,
    Plan,
    Stream,
    check_state,
    deal,
    merge_shard_states,
    read_shared,
    shard_order,
    started,
    streams_of,
)

__all__ = ["ShardDataset", "merge_shard_states"]

T = TypeVar("T")
_END = object()


class ShardDataset(IterableDataset[T], Generic[T]):
    """Iterate the samples of many shards; checkpoint and resume the position exactly.

    `read_shard(shard)` returns one shard's samples, in a fixed order. Under a DataLoader use
    `ElasticLoader`, whose state counts the batches the loop received (a plain DataLoader
    reads one pass: its workers' positions never reach `state_dict()`).
    """

    def __init__(
        self,
        shards: Sequence[str | os.PathLike[str]],
        read_shard: Callable[[str], Iterable[T]],
        *,
        seed: int = 0,
        shuffle: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if len(shards) == 0:
            raise ValueError("ShardDataset needs at least one shard; got an empty list")
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        self.shards = [os.fspath(s) for s in shards]
        self.read_shard = read_shard
        self.seed = seed
        self.shuffle = bool(shuffle)
        self.set_world(rank, world_size)
        self._epoch = 0
        self._num_workers = 0  # set by ElasticLoader from its DataLoader
        self._plan: Plan | None = None
        self._pending: dict[str, Any] | None = None
        self._shared: torch.Tensor | None = None  # the plan, shared with worker processes
        self._tagging = False

    @property
    def epoch(self) -> int:
        """The epoch being (or about to be) read."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its first shard; the current epoch again keeps its position."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        if epoch != self._epoch:
            self._epoch, self._plan, self._pending = epoch, None, None

    def set_world(self, rank: int | None, world_size: int | None) -> None:
        """Pin (or with None, unpin) the rank and world size the shards are dealt over."""
        resolve_world(rank, world_size)
        self._rank, self._world_size = rank, world_size

    def plan(self) -> Plan:
        """This rank's streams for the current epoch and topology (built on first use)."""
        rank, world_size = resolve_world(self._rank, self._world_size)
        topology = (self._epoch, rank, world_size, self._num_workers)
        plan = self._plan
        if plan is not None and (plan.epoch, plan.rank, plan.world_size, plan.num_workers) == (
            topology
        ):
            return plan
        if self._pending is not None:
            plan = self._plan_from_state(self._pending, rank, world_size)
            self._pending = None
        else:
            if plan is not None and plan.epoch == self._epoch and started(plan):
                raise RuntimeError(
                    f"ShardDataset was read on rank {plan.rank} of {plan.world_size} with "
                    f"{plan.num_workers} workers and is now read on rank {rank} of {world_size} "
                    f"with {self._num_workers}; mid-epoch, take a merged state "
                    "(merge_shard_states) and load it instead"
                )
            order = shard_order(len(self.shards), self.seed, self._epoch, self.shuffle)
            streams = deal([(s, 0) for s in order], rank, world_size, self._num_workers)
            plan = Plan(self._epoch, rank, world_size, self._num_workers, streams)
        self._plan = plan
        return plan

    def _plan_from_state(self, state: dict[str, Any], rank: int, world_size: int) -> Plan:
        workers = self._num_workers
        if state["kind"] == "merged":
            items = [(int(s), int(o)) for s, o in state["remaining"]]
            return Plan(self._epoch, rank, world_size, workers,
                         deal(items, rank, world_size, workers))
        saved = (state["rank"], state["world_size"], state["num_workers"])
        if saved != (rank, world_size, workers):
            raise ValueError(
                f"ShardDataset state was saved by rank {saved[0]} of {saved[1]} with "
                f"num_workers={saved[2]}; this is rank {rank} of {world_size} with "
                f"num_workers={workers}. To resume on a different topology, gather every "
                "rank's state, merge them with merge_shard_states() and load the merged state."
            )
        streams = [Stream(items, done, offset) for items, done, offset in streams_of(state)]
        return Plan(self._epoch, rank, world_size, workers, streams, int(state["next_stream"]))

    def state_dict(self) -> dict[str, Any]:
        """This rank's position as plain values: its streams' shards, items done and offsets."""
        if self._pending is not None:  # loaded, not read since: the same position
            return dict(self._pending)
        plan = self.plan()
        return {
            "version": STATE_VERSION,
            "kind": "rank",
            "seed": self.seed,
            "epoch": plan.epoch,
            "num_shards": len(self.shards),
            "shuffle": self.shuffle,
            "rank": plan.rank,
            "world_size": plan.world_size,
            "num_workers": plan.num_workers,
            "next_stream": plan.next_stream,
            # Columns, not a dict per stream: a flattened checkpoint's keys stay fixed.
            "streams": {
                "items": [[[s, o] for s, o in st.items] for st in plan.streams],
                "done": [st.done for st in plan.streams],
                "offset": [st.offset for st in plan.streams],
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from this rank's `state_dict()` (same topology) or a merged state (any)."""
        check_state(state, self.seed, len(self.shards), self.shuffle)
        self._epoch = int(state["epoch"])
        self._plan = None
        self._pending = dict(state)

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        if info is None:
            if self._num_workers > 0:
                raise RuntimeError(
                    "this ShardDataset is set up for DataLoader workers by ElasticLoader; "
                    "iterate the loader, not the dataset"
                )
            plan = self.plan()
            stream = plan.streams[0]
            if self._tagging:  # ElasticLoader tracks positions itself from the tags
                stream = Stream(list(stream.items), stream.done, stream.offset)
            return self._read(stream, 0, plan.epoch)
        if self._shared is not None:
            epoch, stream_id, stream = read_shared(self._shared, info.id)
            return self._read(stream, stream_id, epoch)
        # A plain DataLoader (no ElasticLoader): each worker deals the plan itself.
        self._num_workers = info.num_workers
        plan = self.plan()
        return self._read(plan.streams[info.id], info.id, plan.epoch)

    def __getstate__(self) -> dict[str, Any]:
        # A spawned worker has no process group: hand it the world this process sees.
        state = dict(self.__dict__)
        state["_rank"], state["_world_size"] = resolve_world(self._rank, self._world_size)
        return state

    def _read(self, stream: Stream, stream_id: int, epoch: int) -> Iterator[Any]:
        while stream.done < len(stream.items):
            shard = stream.items[stream.done][0]
            slot = CpuRngSlot(shard_seed(self.seed, epoch, shard))
            samples = slot.call(partial(_open_shard, self.read_shard, self.shards[shard]))
            pull = partial(slot.call, partial(next, samples, _END))
            for _ in range(stream.offset):  # re-read and drop what was consumed before
                if pull() is _END:
                    break
            current = pull()
            if current is _END:
                stream.advance()  # the shard held no (more) samples
            while current is not _END:
                # One ahead: after a shard's last sample the position is already the next shard.
                following = pull()
                if following is _END:
                    stream.advance()
                else:
                    stream.offset += 1
                if self._tagging:  # ElasticLoader's position comes with the sample
                    current = Tagged(current, stream_id, stream.done, stream.offset)
                yield current
                current = following


def _open_shard(read_shard: Callable[[str], Iterable[Any]], name: str) -> Iterator[Any]:
    return iter(read_shard(name))
