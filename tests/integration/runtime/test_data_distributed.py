"""Real ranks (forked processes, torch.distributed on gloo): resume on a different world size."""

from __future__ import annotations

import json
import multiprocessing as mp
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from forked_ranks import in_gloo_group
from torch.utils.data import Dataset

from perdure.runtime import ElasticSampler, ShardDataset
from perdure.runtime.data import ElasticLoader, merge_shard_states

N, BATCH = 53, 2
SHARD_SIZES = [4, 7, 1, 0, 5, 3, 6, 2, 8, 3, 5, 1, 2]


class Indices(Dataset[int]):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> int:
        return i


def read_shard(name: str) -> Iterator[tuple[int, int]]:
    shard = int(name)
    return iter([(shard, j) for j in range(SHARD_SIZES[shard])])


def _shards() -> ShardDataset[tuple[int, int]]:
    return ShardDataset([str(i) for i in range(len(SHARD_SIZES))], read_shard, seed=2)


def _rank_main(rank: int, world: int, store: str, out: str, fn: Callable[..., Any]) -> None:
    in_gloo_group(rank, world, store, out, lambda: fn(rank, world))


def _run(tmp_path: Path, world: int, fn: Callable[..., Any]) -> list[Any]:
    out = tmp_path / uuid.uuid4().hex
    out.mkdir()
    ctx = mp.get_context("fork")
    procs = [
        ctx.Process(target=_rank_main, args=(r, world, str(out / "store"), str(out), fn))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        if p.is_alive():
            p.kill()
    errors = [f.read_text() for f in sorted(out.glob("*.error"))]
    if errors:
        return [RuntimeError(e) for e in errors]
    return [json.loads((out / f"{r}.json").read_text()) for r in range(world)]


def _consume(loader: ElasticLoader, steps: int | None, lockstep: bool = True) -> list[Any]:
    got: list[Any] = []
    for batch in loader:
        if lockstep:  # a real collective per step: the sampler gives every rank equal steps
            dist.all_reduce(torch.ones(1))
        got.append([] if batch is None else [x.tolist() for x in batch]
                   if isinstance(batch, list) else batch.tolist())
        if steps is not None and len(got) == steps:
            break
    return got


def _phase(state: dict[str, Any] | None, shard_state: dict[str, Any] | None,
           steps: int | None) -> Callable[[int, int], Any]:
    def run(rank: int, world: int) -> Any:
        loader = ElasticLoader(Indices(), ElasticSampler(N, BATCH, seed=1))
        shards = ElasticLoader(_shards(), batch_size=2)
        if state is not None:
            loader.load_state_dict(state)
        if shard_state is not None:
            shards.load_state_dict(shard_state)
        samples = _consume(loader, steps)
        # Shards deal unequal numbers of batches to ranks: no collective per step here.
        records = _consume(shards, None if steps is None else rank + 1, lockstep=False)
        states: list[Any] = [None] * world
        dist.all_gather_object(states, shards.state_dict())
        return {"samples": samples, "records": records, "state": loader.state_dict(),
                "merged": merge_shard_states(states)}
    return run


def test_a_job_resumed_on_fewer_ranks_consumes_every_sample_once(tmp_path: Path) -> None:
    first = _run(tmp_path, 3, _phase(None, None, 4))
    assert not any(isinstance(r, Exception) for r in first), first
    assert all(r["state"] == first[0]["state"] for r in first)
    assert first[0]["state"]["cursor"] == 4 * 3 * BATCH
    assert first[0]["merged"] == first[1]["merged"]
    second = _run(tmp_path, 2, _phase(first[0]["state"], first[0]["merged"], None))
    assert not any(isinstance(r, Exception) for r in second), second
    samples = [i for r in first + second for batch in r["samples"] for i in batch]
    assert sorted(samples) == list(range(N))
    records = [tuple(x) for r in first + second for batch in r["records"]
               for x in zip(*batch, strict=True)]
    expected = {(s, j) for s, n in enumerate(SHARD_SIZES) for j in range(n)}
    assert Counter(records) == Counter(expected)


def _mismatched_workers(rank: int, world: int) -> Any:
    ElasticLoader(_shards(), batch_size=2, num_workers=rank)
    return "built"


def test_ranks_with_different_num_workers_are_told_so(tmp_path: Path) -> None:
    results = _run(tmp_path, 2, _mismatched_workers)
    assert len(results) == 2 and all(isinstance(r, Exception) for r in results)
    for r in results:
        assert "every rank must use the same num_workers" in str(r)
        assert "rank 0: 0, rank 1: 1" in str(r)


@pytest.fixture(autouse=True)
def _no_inherited_world(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
