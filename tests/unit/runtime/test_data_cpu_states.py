"""The loader's fast generator swap: what it puts back is exactly what it took, cached
Gaussians included, on the memcpy path and on the get_state/set_state fallback alike; and a
watch tells whether anything drew in between."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

from perdure.runtime.data import cpu_states
from perdure.runtime.data.seeding import CpuRngSlot, isolated_seed
from perdure.runtime.rng import seed_cpu_generators


@pytest.fixture(params=["memcpy", "probe", "fallback"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test on the raw-bytes path, on the path that reads NumPy's cached Gaussian by
    drawing (where its offset is not found) and on the path taken where no layout is known."""
    if request.param == "probe":
        monkeypatch.setattr(cpu_states, "_raw", cpu_states._Raw())
        monkeypatch.setattr(cpu_states, "_gauss_view", lambda owner: None)
        assert not cpu_states.watchable()
    elif request.param == "fallback":
        monkeypatch.setattr(cpu_states, "_raw", cpu_states._Raw())
        monkeypatch.setattr(cpu_states, "_raw_view", lambda generator: None)
        monkeypatch.setattr(cpu_states, "_py_raw", cpu_states._PythonRaw())
        monkeypatch.setattr(cpu_states, "_python_view", lambda: None)
    else:
        assert cpu_states._raw.current() is not None, "this NumPy should take the fast path"
        assert cpu_states._py_raw.current() is not None, "this CPython should too"
        assert cpu_states.watchable(), "and NumPy's cached Gaussian should be found"
    yield request.param


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
def test_restore_puts_back_the_exact_state(path: str, setup: Callable[[], None],
                                           work: str) -> None:
    setup()
    before = _legacy_state()
    saved = cpu_states.capture()
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
    cpu_states.restore(saved)
    assert _legacy_state() == before
    setup()
    expected = _draws()
    setup()
    cpu_states.restore(cpu_states.capture())
    assert _draws() == expected


@pytest.mark.parametrize("setup", _loop_states(), ids=["plain", "cached", "block_end"])
@pytest.mark.parametrize("value", [0, 123, 2**32 - 1, 2**32, 2**32 + 1, 0x9E3779B97F4A7C15,
                                   2**64 - 1])
def test_seed_generators_makes_the_states_of_seed_cpu_generators(
        path: str, setup: Callable[[], None], value: int) -> None:
    """The fast seeding (NumPy's key copied from Python's) leaves all three generators exactly
    as seed_cpu_generators does, whatever state they were in (a cached Gaussian included)."""
    seed_cpu_generators(value)
    want_state, want_draws = _legacy_state(), _draws()
    setup()
    cpu_states.seed_generators(value)
    assert _legacy_state() == want_state
    assert _draws() == want_draws


def test_seed_generators_checks_its_seed() -> None:
    for bad, error in ((-1, ValueError), (2**64, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error):
            cpu_states.seed_generators(bad)  # type: ignore[arg-type]


def test_isolated_seed_seeds_as_seed_cpu_generators_and_leaves_the_loop_alone(path: str) -> None:
    seed_cpu_generators(123)
    expected_inside = _draws()
    seed_cpu_generators(1)
    np.random.standard_normal()
    expected_after = _draws()
    seed_cpu_generators(1)
    np.random.standard_normal()
    with isolated_seed(123):
        inside = _draws()
    assert inside == expected_inside
    assert _draws() == expected_after


def test_a_slot_keeps_its_stream_apart_from_the_loop(path: str) -> None:
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


@pytest.mark.parametrize("setup", _loop_states(), ids=["plain", "cached", "block_end"])
@pytest.mark.parametrize("work", ["nothing", "python", "numpy_uniform", "numpy_cached_gauss",
                                  "torch", "numpy_reseed_same_key"])
def test_a_watch_tells_whether_anything_drew(setup: Callable[[], None], work: str) -> None:
    """Every kind of draw moves the watch's marks, the one that only takes NumPy's cached
    Gaussian (its MT bytes stay put) included; capturing itself moves nothing."""
    setup()
    if np.random.get_state(legacy=True)[3] == 0:  # type: ignore[index]
        np.random.standard_normal()  # a cached Gaussian, for the draw that only takes it
    watch = cpu_states.Watch()
    watch.before()
    cpu_states.capture()
    assert not watch.drew()
    if work == "python":
        random.random()
    elif work == "numpy_uniform":
        np.random.rand()
    elif work == "numpy_cached_gauss":
        np.random.standard_normal()
    elif work == "torch":
        torch.rand(1)
    elif work == "numpy_reseed_same_key":  # the key comes back, the cached Gaussian does not
        state = np.random.get_state(legacy=True)
        np.random.set_state((*state[:3], 0, 0.0))  # type: ignore[arg-type,misc]
    assert watch.drew() == (work != "nothing")


def test_the_cached_gaussian_is_found_on_this_numpy() -> None:
    """The offset search finds NumPy's cached Gaussian here (or lazy seeding never runs)."""
    assert cpu_states._gauss_offset(type(np.random.mtrand._rand)) is not None


@pytest.mark.parametrize("setup", _loop_states(), ids=["plain", "cached", "block_end"])
@pytest.mark.parametrize("work", ["nothing", "python", "python_block", "python_cached_gauss",
                                  "numpy_uniform",
                                  "numpy_cached_gauss", "numpy_block", "torch", "torch_normal",
                                  "reseed_all"])
def test_a_watch_sees_every_draw_and_its_before_state_undoes_it(setup: Callable[[], None],
                                                                 work: str) -> None:
    """The watch's marks move with every kind of draw (a whole key block of draws included,
    which brings the position back), and what `before()` returned puts the states back; the
    loop's own draws between two watched pieces of work are never undone."""
    watch = cpu_states.Watch()
    setup()
    if np.random.get_state(legacy=True)[3] == 0:  # type: ignore[index]
        np.random.standard_normal()
    watch.before()
    assert not watch.drew()
    random.random()  # the loop draws between two fetches: the next before() holds that
    np.random.rand()
    torch.rand(1)
    if random.getstate()[2] is None:
        random.gauss(0.0, 1.0)  # a cached gauss_next, for the draw that only takes it
    expected = _legacy_state(), torch.get_rng_state()
    before = watch.before()
    if work == "python":
        random.random()
    elif work == "python_cached_gauss":
        random.gauss(0.0, 1.0)
    elif work == "python_block":
        random.getrandbits(32 * 624)  # the index comes back where it was
    elif work == "numpy_uniform":
        np.random.rand()
    elif work == "numpy_cached_gauss":
        np.random.standard_normal()
    elif work == "numpy_block":
        np.random.randint(0, 2**31, size=624)  # the pos comes back where it was
    elif work == "torch":
        torch.rand(1)
    elif work == "torch_normal":
        torch.randn(1)
    elif work == "reseed_all":
        seed_cpu_generators(12345)
    assert watch.drew() == (work != "nothing")
    cpu_states.restore(before)
    got = _legacy_state(), torch.get_rng_state()
    assert got[0] == expected[0]
    assert torch.equal(got[1], expected[1])
