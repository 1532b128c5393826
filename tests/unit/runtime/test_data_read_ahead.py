"""Without worker processes, ElasticLoader fetches small batches several at a time: the
batches, their order, where a failure surfaces, a resume and the training loop's random
streams are what one batch at a time gives; large batches and `read_ahead=1` are fetched one
per `next()`, and a collate_fn of the user's always runs at `next()`."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from tests.helpers.loader_epochs import epochs_of
from torch.utils.data import Dataset

from perdure.runtime import ElasticSampler
from perdure.runtime.data import ElasticLoader
from perdure.runtime.data.loader import READ_AHEAD_MAX

SAMPLES, BATCH = 60, 2


class Logged(Dataset[torch.Tensor]):
    """Sample i (`width` floats), each fetch logged in `log`; sample `fails` raises."""

    def __init__(self, log: list[str], width: int = 1, fails: int | None = None) -> None:
        self.log, self.width, self.fails = log, width, fails

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.fails:
            random.random()  # drew, then failed: the draw must be undone
            raise OSError(f"sample {i} is bad")
        self.log.append(f"fetch {i}")
        return torch.full((self.width,), float(i))


def _loader(dataset: Dataset[Any], **kwargs: Any) -> ElasticLoader:
    return ElasticLoader(dataset, ElasticSampler(SAMPLES, BATCH, seed=3, rank=0, world_size=2),
                         **kwargs)


def _read(loader: ElasticLoader, log: list[str], batches: int) -> list[list[float]]:
    """`batches` batches of epoch 0, each `next()` logged."""
    loader.set_epoch(0)
    got = []
    it = iter(loader)
    for _ in range(batches):
        log.append("next")
        got.append(next(it)[:, 0].tolist())
    return got


def _fetches_per_next(log: list[str]) -> list[int]:
    """How many samples were fetched before each `next()` returned (log order)."""
    counts, now = [], 0
    for entry in [*log[1:], "next"]:
        if entry == "next":
            counts.append(now)
            now = 0
        else:
            now += 1
    return counts


def test_small_batches_are_fetched_ahead_and_are_the_same_batches() -> None:
    ahead_log: list[str] = []
    ahead = _read(_loader(Logged(ahead_log)), ahead_log, 12)
    one_log: list[str] = []
    one = _read(_loader(Logged(one_log), read_ahead=1), one_log, 12)
    assert ahead == one
    assert _fetches_per_next(one_log) == [BATCH] * 12
    # the first batch alone (it sizes the batches), then READ_AHEAD_MAX at once
    assert _fetches_per_next(ahead_log)[:3] == [BATCH, READ_AHEAD_MAX * BATCH, 0]


def test_large_batches_are_fetched_one_per_next() -> None:
    log: list[str] = []
    _read(_loader(Logged(log, width=70_000)), log, 5)  # 1.1 MB a batch
    assert _fetches_per_next(log) == [BATCH] * 5


def test_read_ahead_is_checked() -> None:
    with pytest.raises(ValueError, match="read_ahead is 0"):
        _loader(Logged([]), read_ahead=0)


def test_a_collate_fn_of_the_users_runs_at_next() -> None:
    log: list[str] = []

    def collate(samples: list[torch.Tensor]) -> torch.Tensor:
        log.append("collate")
        return torch.stack(samples)

    _read(_loader(Logged(log), collate_fn=collate), log, 6)
    assert [e for e in log if not e.startswith("fetch ")] == ["next", "collate"] * 6
    assert _fetches_per_next([e for e in log if e != "collate"])[1] == READ_AHEAD_MAX * BATCH


def test_a_failure_read_ahead_surfaces_at_its_batch_and_draws_nothing() -> None:
    whole = _read(_loader(Logged([])), [], 12)
    fails = int(whole[4][1])  # the second sample of the fifth batch
    loader = _loader(Logged([], fails=fails))
    loader.set_epoch(0)
    it = iter(loader)
    random.seed(3)
    expected = [random.random() for _ in range(3)]
    random.seed(3)
    got = [next(it)[:, 0].tolist() for _ in range(4)]
    with pytest.raises(OSError, match=f"sample {fails} is bad"):
        next(it)
    assert got == whole[:4]
    assert [random.random() for _ in range(3)] == expected


def test_a_batch_that_fails_to_collate_fails_at_its_batch() -> None:
    whole = _read(_loader(Logged([])), [], 12)
    odd = int(whole[5][0])

    class Ragged(Logged):
        def __getitem__(self, i: int) -> torch.Tensor:
            return torch.zeros(2) if i == odd else super().__getitem__(i)

    loader = _loader(Ragged([]))
    loader.set_epoch(0)
    it = iter(loader)
    assert [next(it)[:, 0].tolist() for _ in range(5)] == whole[:5]
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        next(it)


@pytest.mark.parametrize("stop", [1, 2, 5, 9, 10])
def test_a_resume_inside_a_group_read_ahead_gives_the_same_tail(stop: int) -> None:
    whole = epochs_of(_loader(Logged([])), range(2))
    first = _loader(Logged([]))
    head = epochs_of(first, range(2), stop)
    second = _loader(Logged([]))
    second.load_state_dict(first.state_dict())
    tail = epochs_of(second, range(second.epoch, 2))
    assert [b.tolist() for b in head + tail] == [b.tolist() for b in whole]


def test_a_dataset_that_prefetches_is_read_one_batch_per_next() -> None:
    class Prefetching(Logged):
        def prefetch(self, indices: list[int]) -> None:
            self.log.append(f"prefetch {len(indices)}")

    log: list[str] = []
    _read(_loader(Prefetching(log)), log, 5)
    assert _fetches_per_next([e for e in log if not e.startswith("prefetch")]) == [BATCH] * 5
