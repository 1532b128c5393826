"""ElasticLoader follows an epoch set on its sampler directly (as Lightning sets it)."""

from __future__ import annotations

import torch

from perdure.runtime import ElasticLoader, ElasticSampler


def test_an_epoch_set_on_the_sampler_starts_that_epoch() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(12))
    sampler = ElasticSampler(12, 4, seed=0, rank=0, world_size=1)
    loader = ElasticLoader(data, sampler)
    first = [int(i) for (batch,) in loader for i in batch]
    assert sorted(first) == list(range(12)) and len(loader) == 0
    sampler.set_epoch(1)  # what Lightning does between epochs; the loader is not told
    assert len(loader) == 3
    second = [int(i) for (batch,) in loader for i in batch]
    assert sorted(second) == list(range(12)) and second != first and loader.epoch == 1


def test_an_iterator_made_before_a_state_is_loaded_starts_at_that_state() -> None:
    """Lightning makes its iterator, then restores the loader's state, then iterates."""
    data = torch.utils.data.TensorDataset(torch.arange(12))

    def loader() -> ElasticLoader:
        return ElasticLoader(data, ElasticSampler(12, 4, seed=0, rank=0, world_size=1))

    whole = [int(i) for (batch,) in loader() for i in batch]
    first = loader()
    it = iter(first)
    next(it)
    state = first.state_dict()
    first.load_state_dict(state)  # moves the position: the iterator it already advanced stops
    assert list(it) == []
    second = loader()
    made = iter(second)
    second.load_state_dict(state)
    assert [int(i) for (batch,) in made for i in batch] == whole[4:]
