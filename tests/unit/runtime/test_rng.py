"""rng_state / set_rng_state / seed_everything: exact round trips, plain-value layout."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest
import torch

from perdure.runtime import rng_state, seed_everything, set_rng_state
from perdure.runtime.rng import derive_seed


def _draw() -> tuple[float, float, float, float, list[float]]:
    return (
        random.random(),
        random.gauss(0.0, 1.0),  # leaves a cached gaussian in Python's state
        float(np.random.rand()),
        float(np.random.standard_normal()),  # and one in NumPy's
        torch.rand(3).tolist(),
    )


def test_restore_repeats_every_generator_exactly() -> None:
    seed_everything(123)
    _draw()
    state = rng_state()
    first = _draw()
    _draw()
    set_rng_state(state)
    assert _draw() == first


def test_restore_keeps_cached_gaussians() -> None:
    seed_everything(5)
    random.gauss(0.0, 1.0)  # Python caches the second value of the pair
    np.random.standard_normal()
    state = rng_state()
    expected = (random.gauss(0.0, 1.0), float(np.random.standard_normal()))
    seed_everything(99)
    set_rng_state(state)
    assert (random.gauss(0.0, 1.0), float(np.random.standard_normal())) == expected


def test_state_survives_weights_only_save_and_json_for_scalars() -> None:
    seed_everything(7)
    state = rng_state()
    expected = _draw()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)  # refuses anything but plain values
    seed_everything(8)
    set_rng_state(loaded)
    assert _draw() == expected

    scalars = {k: v for k, v in state["python"].items() if not isinstance(v, torch.Tensor)}
    assert json.loads(json.dumps(scalars)) == scalars
    assert state["torch"].dtype == torch.uint8
    assert state["python"]["state"].dtype == torch.int64
    assert state["numpy"]["key"].shape == (624,)


def test_seed_everything_matches_conventional_seeding_for_small_seeds() -> None:
    seed_everything(42)
    ours = _draw()
    random.seed(42)
    np.random.seed(42)
    torch.manual_seed(42)
    assert _draw() == ours


def test_wide_seeds_are_accepted_and_distinct() -> None:
    seed_everything(2**40 + 1)
    a = _draw()
    seed_everything(2**40 + 2)
    assert _draw() != a


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5, "3", True])
def test_bad_seed_is_rejected_with_the_allowed_range(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match="seed"):
        seed_everything(bad)  # type: ignore[arg-type,unused-ignore]


def test_wrong_version_is_rejected() -> None:
    state = rng_state()
    state["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        set_rng_state(state)


def test_derive_seed_is_stable_and_sensitive_to_every_part() -> None:
    # Fixed value: a change here would silently change every resumed job's augmentations.
    assert derive_seed(0, 1, 2) == 178044716527488389
    seen = {derive_seed(0, 1, 2), derive_seed(0, 2, 1), derive_seed(1, 1, 2), derive_seed(0, 1)}
    assert len(seen) == 4
    assert 0 <= derive_seed(-5, 2**70) < 2**64


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_generators_round_trip() -> None:
    seed_everything(3)
    state = rng_state()
    expected = torch.rand(4, device="cuda").tolist()
    torch.rand(4, device="cuda")
    set_rng_state(state)
    assert torch.rand(4, device="cuda").tolist() == expected
