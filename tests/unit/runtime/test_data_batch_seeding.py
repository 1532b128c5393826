"""The main-process loader fetches every batch under its own seed: whatever a dataset draws
(never, always, or only for some samples; from torch, NumPy, Python, or only NumPy's cached
Gaussian), batches read ahead are those fetched one at a time, each sample is fetched once, a
resume gives the same tail, and the training loop's random stream is untouched."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from tests.helpers.loader_epochs import epochs_of
from torch.utils.data import Dataset

from perdure.runtime import ElasticSampler
from perdure.runtime.data import ElasticLoader
from perdure.runtime.data.sampler import Batch

SAMPLES, BATCH = 45, 3


class Sometimes(Dataset[torch.Tensor]):
    """Sample i, plus a draw from `source` for the samples that `draws_for` picks."""

    def __init__(self, source: str, draws_for: str) -> None:
        self.source, self.draws_for = source, draws_for
        self.fetched: Counter[int] = Counter()

    def __len__(self) -> int:
        return SAMPLES

    def _draws(self, i: int) -> bool:
        return {"never": False, "always": True, "some": i % 11 == 7}[self.draws_for]

    def __getitem__(self, i: int) -> torch.Tensor:
        self.fetched[i] += 1
        noise = 0.0
        if self._draws(i):
            noise = {"torch": lambda: float(torch.rand(())),
                     "numpy": lambda: float(np.random.rand()),
                     "python": random.random,
                     "numpy_cached_gauss": lambda: float(np.random.standard_normal())}[
                         self.source]()
        return torch.tensor([float(i), noise], dtype=torch.float64)


def _loader(source: str, draws_for: str, read_ahead: int | None = None) -> ElasticLoader:
    return ElasticLoader(Sometimes(source, draws_for),
                         ElasticSampler(SAMPLES, BATCH, seed=5, rank=1, world_size=2),
                         read_ahead=read_ahead)


def _loop_state() -> None:
    """The training loop's generators, NumPy's holding a cached Gaussian."""
    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)
    np.random.standard_normal()


def _loop_draws() -> tuple[Any, ...]:
    return (torch.rand(2).tolist(), random.random(), np.random.rand(),
            float(np.random.standard_normal()))


@pytest.mark.parametrize("source", ["torch", "numpy", "python", "numpy_cached_gauss"])
@pytest.mark.parametrize("draws_for", ["never", "always", "some"])
def test_batches_read_ahead_are_those_fetched_one_at_a_time(source: str,
                                                             draws_for: str) -> None:
    _loop_state()
    expected_loop = _loop_draws()
    _loop_state()
    want = epochs_of(_loader(source, draws_for, read_ahead=1), range(2))
    _loop_state()
    loader = _loader(source, draws_for)
    got = epochs_of(loader, range(2))
    assert _loop_draws() == expected_loop  # the loop's stream, cached Gaussian included
    assert [b.tolist() for b in got] == [b.tolist() for b in want]
    fetched = loader.dataloader.dataset.dataset.fetched  # type: ignore[attr-defined]
    assert sum(fetched.values()) == sum(len(b) for b in got)  # nothing fetched twice
    if draws_for != "never":
        assert len({float(b[:, 1].sum()) for b in got}) > 1


@pytest.mark.parametrize("stop", [1, 2, 6, 9])
def test_a_resume_anywhere_gives_the_same_tail(stop: int) -> None:
    whole = epochs_of(_loader("torch", "some"), range(2))
    first = _loader("torch", "some")
    head = epochs_of(first, range(2), stop)
    second = _loader("torch", "some")
    second.load_state_dict(first.state_dict())
    tail = epochs_of(second, range(second.epoch, 2))
    assert [b.tolist() for b in head + tail] == [b.tolist() for b in whole]
    assert len({float(b[:, 1].sum()) for b in whole if float(b[:, 1].sum())}) > 1


def test_a_fetch_that_fails_after_drawing_leaves_the_loops_stream_alone() -> None:
    """A loop may skip a batch whose fetch raised: the draws made before the error are
    undone, as a seeded fetch's are."""

    class Fails(Sometimes):
        def __getitem__(self, i: int) -> torch.Tensor:
            if i == 7:
                random.random()
                raise OSError("a bad sample")
            return super().__getitem__(i)

    seeded = _loader("python", "never").dataloader.dataset
    seeded.dataset = Fails("python", "never")  # type: ignore[attr-defined]
    seeded.__getitems__(Batch([1, 2, 3], 0, 0, 1))  # type: ignore[attr-defined]
    random.seed(3)
    expected = [random.random() for _ in range(3)]
    random.seed(3)
    with pytest.raises(OSError, match="a bad sample"):
        seeded.__getitems__(Batch([4, 7, 9], 0, 6, 1))  # type: ignore[attr-defined]
    assert [random.random() for _ in range(3)] == expected
