"""ElasticLoader under real DataLoader worker processes: exact resume despite prefetching."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.helpers.loader_epochs import epochs_of
from torch.utils.data import Dataset

from perdure.runtime import CachedVolume, ElasticSampler, ShardDataset
from perdure.runtime.data import ENV_MIN_FREE_BYTES, ElasticLoader


@pytest.fixture(autouse=True)
def _room_on_any_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default the cache keeps 10% of its filesystem free, so on a nearly full disk every
    copy would be evicted at once. Tests of the threshold set their own."""
    monkeypatch.setenv(ENV_MIN_FREE_BYTES, "0")


WORKERS = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}


class Augmented(Dataset[torch.Tensor]):
    """Sample i with a random "augmentation" from each of torch, NumPy and Python."""

    def __len__(self) -> int:
        return 37

    def __getitem__(self, i: int) -> torch.Tensor:
        noise = [int(torch.randint(0, 10**6, ())), int(np.random.randint(10**6)),
                 random.randrange(10**6)]
        return torch.tensor([i, *noise])


def _map_loader(**kw: Any) -> ElasticLoader:
    sampler = ElasticSampler(37, 4, seed=11, rank=1, world_size=2)
    return ElasticLoader(Augmented(), sampler, **kw)


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Batches (tensors, or lists/tuples of them) are equal, element by element."""
    return len(a) == len(b) and all(
        _same(x, y) if isinstance(x, (list, tuple)) else torch.equal(x, y)
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("stop", [1, 3, 5, 8])
def test_map_style_resumes_at_the_next_batch_with_prefetching_workers(stop: int) -> None:
    whole = epochs_of(_map_loader(**WORKERS), range(2))  # 5 batches per epoch on rank 1
    first = _map_loader(**WORKERS)
    head = epochs_of(first, range(2), stop)
    state = first.state_dict()
    if stop < 5:
        assert first.sampler.cursor > state["cursor"], "workers should have run ahead"
    second = _map_loader(**WORKERS)
    second.load_state_dict(state)
    tail = epochs_of(second, range(second.epoch, 2))
    assert _same(head + tail, whole)
    assert len({int(b[0, 1]) for b in whole}) == len(whole)  # the noise differs per batch


def test_iterating_leaves_the_training_loops_random_stream_alone() -> None:
    for kw in ({"num_workers": 0}, WORKERS):
        torch.manual_seed(0)
        random.seed(0)
        expected = (torch.rand(2).tolist(), random.random())
        torch.manual_seed(0)
        random.seed(0)
        epochs_of(_map_loader(**kw), range(1))
        assert (torch.rand(2).tolist(), random.random()) == expected, kw


def test_a_rank_with_nothing_left_gets_none_for_the_last_step() -> None:
    class Tiny(Dataset[int]):
        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int) -> int:
            return i

    for workers in (0, 2):
        loader = ElasticLoader(Tiny(), ElasticSampler(3, 1, rank=3, world_size=4),
                               num_workers=workers)
        assert list(loader) == [None]
        assert loader.state_dict()["cursor"] == 3


SHARD_SIZES = [5, 1, 7, 0, 3, 9, 2, 4, 6, 1, 8]


def read_shard(name: str) -> Iterator[tuple[int, int, float]]:
    shard = int(name)
    for j in range(SHARD_SIZES[shard]):
        yield shard, j, random.random()  # an "augmentation": replays via the shard's seed


def _shard_loader(**kw: Any) -> ElasticLoader:
    shards = ShardDataset([str(i) for i in range(len(SHARD_SIZES))], read_shard, seed=5,
                          rank=0, world_size=1)
    return ElasticLoader(shards, batch_size=3, **kw)


@pytest.mark.parametrize("stop", [1, 6, 9, 15])
def test_shards_resume_at_the_next_batch_with_prefetching_workers(stop: int) -> None:
    whole = epochs_of(_shard_loader(**WORKERS), range(2))
    assert sum(len(b[0]) for b in whole) == 2 * sum(SHARD_SIZES)
    first = _shard_loader(**WORKERS)
    head = epochs_of(first, range(2), stop)
    second = _shard_loader(**WORKERS)
    second.load_state_dict(first.state_dict())
    tail = epochs_of(second, range(second.epoch, 2))
    assert _same(head + tail, whole)


@pytest.mark.parametrize("kind", ["map", "shards"])
@pytest.mark.parametrize("held", [1, 2])
def test_a_position_held_back_resumes_at_the_batches_read_ahead(kind: str, held: int) -> None:
    """A loop that reads ahead (Lightning over a loader without a length holds one batch):
    state_dict(held_back=k) resumes at the first of the k batches it was handed, not after."""
    make = _map_loader if kind == "map" else _shard_loader
    whole = epochs_of(make(), range(1))
    first = make()
    head = epochs_of(first, range(1), stop=4)
    second = make()
    second.load_state_dict(first.state_dict(held_back=held))
    assert first.state_dict(held_back=0) == make_state_after(make, 4)  # left as it was
    tail = epochs_of(second, range(second.epoch, 1))
    assert _same(head[:4 - held] + tail, whole)
    with pytest.raises(ValueError, match="held_back"):
        first.state_dict(held_back=99)


def make_state_after(make: Any, batches: int) -> dict[str, Any]:
    loader = make()
    epochs_of(loader, range(1), stop=batches)
    return dict(loader.state_dict())


def test_shard_plan_reaches_spawned_workers() -> None:
    whole = epochs_of(_shard_loader(**WORKERS), range(1))
    first = _shard_loader(**WORKERS)
    head = epochs_of(first, range(1), 4)
    second = _shard_loader(num_workers=2, multiprocessing_context="spawn")
    second.load_state_dict(first.state_dict())
    assert _same(head + epochs_of(second, range(1)), whole)


def test_loader_prefetches_coming_files_of_a_cached_volume(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    for i in range(12):
        (tmp_path / "src" / f"{i:02d}").write_bytes(bytes([i]) * 100)
    volume = CachedVolume(tmp_path / "src", tmp_path / "cache", read=lambda p: Path(p).read_bytes())
    sampler = ElasticSampler(12, 2, rank=0, world_size=1)
    loader = ElasticLoader(volume, sampler, prefetch_batches=2, collate_fn=list)
    it = iter(loader)
    first = next(it)
    volume.wait()
    coming = sampler.indices(2, 0, 1) + sampler.indices(4, 0, 1)
    cached = [i for i in range(12) if Path(volume.local_path(i)).exists()]
    assert sorted(cached) == sorted(sampler.indices(0, 0, 1) + coming)
    assert first == [bytes([i]) * 100 for i in sampler.indices(0, 0, 1)]
    assert sum(len(b) for b in it) == 10


def test_loader_arguments_it_owns_are_refused() -> None:
    with pytest.raises(TypeError, match="'batch_size'"):
        _map_loader(batch_size=4)
    with pytest.raises(ValueError, match="in_order=True"):
        _map_loader(in_order=False)
    with pytest.raises(TypeError, match="needs an ElasticSampler"):
        ElasticLoader(Augmented())


def test_a_plain_dataloader_reads_each_shard_sample_once_per_epoch() -> None:
    ranks = [ShardDataset([str(i) for i in range(len(SHARD_SIZES))], read_shard, rank=r,
                          world_size=2) for r in range(2)]
    records = [
        (int(s), int(j))
        for ds in ranks
        for batch in torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2)
        for s, j in zip(batch[0], batch[1], strict=True)
    ]
    assert sorted(records) == sorted((s, j) for s, n in enumerate(SHARD_SIZES) for j in range(n))
