"""The plan of a ShardDataset epoch: which shards each stream reads, and how far it got.

Pure data and functions (no I/O), and the int64 block that carries a rank's plan to its
DataLoader worker processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from perdure.runtime.data.sampler import epoch_order

__all__ = [
    "Plan",
    "Stream",
    "check_state",
    "deal",
    "merge_shard_states",
    "read_shared",
    "shard_order",
    "shared_capacity",
    "write_shared",
]

STATE_VERSION = 1
_HEADER, _PER_WORKER = 2, 5


@dataclass
class Stream:
    """One reader's shards for the epoch and how far it got."""

    items: list[tuple[int, int]]  # (shard index, samples to skip when it is started)
    done: int = 0  # items fully read
    offset: int = 0  # samples of items[done] read, counted from the shard's start

    def advance(self) -> None:
        self.done += 1
        self.offset = self.items[self.done][1] if self.done < len(self.items) else 0

    def finish(self) -> None:
        self.done, self.offset = len(self.items), 0


@dataclass
class Plan:
    """This rank's streams for one epoch on one topology."""

    epoch: int
    rank: int
    world_size: int
    num_workers: int
    streams: list[Stream] = field(default_factory=list)
    next_stream: int = 0  # the stream whose batch comes next (DataLoader's round robin)


def shard_order(num_shards: int, seed: int, epoch: int, shuffle: bool) -> list[int]:
    if not shuffle:
        return list(range(num_shards))
    order: list[int] = epoch_order(num_shards, seed, epoch).tolist()
    return order


def deal(items: list[tuple[int, int]], rank: int, world_size: int, workers: int) -> list[Stream]:
    streams_per_rank = max(1, workers)
    total = world_size * streams_per_rank
    first = rank * streams_per_rank
    mine = [items[g::total] for g in range(first, first + streams_per_rank)]
    return [Stream(its, 0, its[0][1] if its else 0) for its in mine]


def started(plan: Plan) -> bool:
    return any(st.done > 0 or (st.items and st.offset > st.items[0][1]) for st in plan.streams)


def streams_of(state: dict[str, Any]) -> list[tuple[list[tuple[int, int]], int, int]]:
    columns = state["streams"]
    return [
        ([(int(s), int(o)) for s, o in items], int(done), int(offset))
        for items, done, offset in zip(
            columns["items"], columns["done"], columns["offset"], strict=True
        )
    ]


def check_state(state: dict[str, Any], seed: int, num_shards: int, shuffle: bool) -> None:
    if state.get("version") != STATE_VERSION or state.get("kind") not in ("rank", "merged"):
        raise ValueError(
            f"not a ShardDataset state (version {state.get('version')!r}, kind "
            f"{state.get('kind')!r}); pass what state_dict() or merge_shard_states() returned"
        )
    for key, mine in (("seed", seed), ("num_shards", num_shards), ("shuffle", shuffle)):
        if state[key] != mine:
            raise ValueError(
                f"ShardDataset state has {key}={state[key]!r} but this dataset has {mine!r}; "
                "the shard order would differ. Build the dataset with the saved value."
            )


def merge_shard_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Merge every rank's ShardDataset state into one that loads on any topology.

    Pure function. All states must come from the same step: one per rank 0..W-1.
    """
    if not states:
        raise ValueError("merge_shard_states needs the state of every rank; got none")
    first = states[0]
    for st in states:
        check_state(st, first["seed"], first["num_shards"], first["shuffle"])
        if st["kind"] != "rank":
            raise ValueError("merge_shard_states merges per-rank states, got a merged one")
        for key in ("epoch", "world_size", "num_workers"):
            if st[key] != first[key]:
                raise ValueError(
                    f"rank {st['rank']} has {key}={st[key]} but rank {first['rank']} has "
                    f"{first[key]}: states must come from one job at one step"
                )
    ranks = sorted(int(st["rank"]) for st in states)
    if ranks != list(range(int(first["world_size"]))):
        raise ValueError(
            f"merge_shard_states needs one state per rank 0..{first['world_size'] - 1}, "
            f"got ranks {ranks}"
        )
    completed: list[int] = []
    remaining: list[tuple[int, int]] = []
    for st in states:
        for items, done, offset in streams_of(st):
            completed.extend(s for s, _ in items[:done])
            if done < len(items):
                remaining.append((items[done][0], offset))
                remaining.extend(items[done + 1 :])
    order = shard_order(
        int(first["num_shards"]), first["seed"], int(first["epoch"]), first["shuffle"]
    )
    position = {shard: i for i, shard in enumerate(order)}
    remaining.sort(key=lambda item: position[item[0]])
    return {
        "version": STATE_VERSION,
        "kind": "merged",
        "seed": first["seed"],
        "epoch": int(first["epoch"]),
        "num_shards": int(first["num_shards"]),
        "shuffle": first["shuffle"],
        "completed": sorted(completed),
        "remaining": [[s, o] for s, o in remaining],
    }


def shared_capacity(num_shards: int, num_workers: int) -> int:
    """int64 slots a shared plan block needs (a rank's streams hold at most every shard)."""
    return _HEADER + _PER_WORKER * num_workers + 2 * num_shards


def write_shared(block: torch.Tensor, plan: Plan) -> None:
    """Write the plan into the shared block; worker w reads stream (next_stream + w) % n."""
    n = len(plan.streams)
    values = [plan.epoch, n]
    items: list[int] = []
    base = _HEADER + _PER_WORKER * n
    for worker in range(n):
        stream_id = (plan.next_stream + worker) % n
        stream = plan.streams[stream_id]
        values += [stream_id, stream.done, stream.offset, base + len(items), len(stream.items)]
        for shard, skip in stream.items:
            items += [shard, skip]
    data = torch.tensor(values + items, dtype=torch.int64)
    block[: data.numel()].copy_(data)  # fits: shared_capacity counts every shard


def read_shared(block: torch.Tensor, worker: int) -> tuple[int, int, Stream]:
    """(epoch, stream id, stream) that `worker` reads, from a block `write_shared` filled."""
    epoch = int(block[0])
    at = _HEADER + _PER_WORKER * worker
    stream_id, done, offset, start, count = (int(v) for v in block[at : at + _PER_WORKER])
    flat = block[start : start + 2 * count].tolist()
    items = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    return epoch, stream_id, Stream(items, done, offset)
