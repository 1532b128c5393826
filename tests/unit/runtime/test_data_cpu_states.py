"""The loader's generator swap: what it puts back is exactly what it took, cached Gaussians
included."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from perdure.runtime.data.seeding import CpuRngSlot, capture, restore
from perdure.runtime.rng import seed_cpu_generators


def _legacy_state() -> tuple[Any, ...]:
    name, key, pos, has_gauss, gauss = np.random.get_state(legacy=True)  # type: ignore[misc]
    return random.getstate(), name, key.tolist(), pos, has_gauss, gauss


def _draws() -> tuple[Any, ...]:
    return (random.random(), random.gauss(0.0, 1.0), float(np.random.rand()),
            float(np.random.standard_normal()), float(np.random.standard_normal()),
            torch.rand(3).tolist())


def _loop_states() -> list[Callable[[], None]]:
    """Training-loop states to protect: NumPy with and without a cached Gaussian, Python's
    with a cached gauss_next, NumPy right at the end of its 624-word block."""
    def plain() -> None:
        seed_cpu_generators(7)

    def cached() -> None:
        seed_cpu_generators(7)
        np.random.standard_normal()  # caches the second value of the pair
        random.gauss(0.0, 1.0)

    def block_end() -> None:
        seed_cpu_generators(7)
        np.random.randint(0, 2**31, size=623)  # pos 623: the next draw regenerates the key
        random.getrandbits(32 * 623)  # and Python's index 623

    return [plain, cached, block_end]


@pytest.mark.parametrize("setup", _loop_states(), ids=["plain", "cached", "block_end"])
@pytest.mark.parametrize("work", ["nothing", "uniform", "one_gauss", "two_gauss", "reseed"])
def test_restore_puts_back_the_exact_state(setup: Callable[[], None],
                                           work: str) -> None:
    setup()
    before = _legacy_state()
    saved = capture()
    seed_cpu_generators(99)
    if work == "uniform":
        np.random.rand(5)
        random.random()
    elif work in ("one_gauss", "two_gauss"):
        for _ in range(1 if work == "one_gauss" else 2):
            np.random.standard_normal()
            random.gauss(0.0, 1.0)
    elif work == "reseed":
        np.random.seed(3)
        random.seed(3)
    restore(saved)
    assert _legacy_state() == before
    setup()
    expected = _draws()
    setup()
    restore(capture())
    assert _draws() == expected


def test_a_slot_keeps_its_stream_apart_from_the_loop() -> None:
    seed_cpu_generators(5)
    whole = [_draws() for _ in range(3)]
    seed_cpu_generators(1)
    loop = [_draws() for _ in range(3)]
    seed_cpu_generators(1)
    slot = CpuRngSlot(5)
    mixed_slot, mixed_loop = [], []
    for _ in range(3):  # slot and loop interleave, each sees only its own stream
        mixed_slot.append(slot.call(_draws))
        mixed_loop.append(_draws())
    assert mixed_slot == whole
    assert mixed_loop == loop
