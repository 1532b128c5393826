"""Swap the CPU generators' states (Python, NumPy, torch) around data work, in microseconds.

The main-process loader swaps the training loop's generator states out, and a batch's seeded
states in, once per batch. `np.random.get_state()` / `set_state()` copy MT19937's 624 key words
one by one (about 35 us each, most of a batch's bookkeeping on a small model); here NumPy's
global generator is saved and restored as the raw bytes of its MT19937 state (key and pos) with
one memcpy, and its one other piece of state, the legacy cached Gaussian, is read and cleared
through NumPy's own `standard_normal()`:

- reading: draw one `standard_normal()`. If the MT bytes did not move, it returned the cached
  Gaussian (which the state then held); if they moved, nothing was cached. Either way the
  generator is left in an unspecified state, so `capture` is always followed by a seed or a
  `restore` (as `isolated_seed` and `CpuRngSlot` do);
- restoring a state without a cached Gaussian: clear the cache (one or two `standard_normal()`
  draws, until one leaves the MT bytes alone), then memcpy the bytes back. A state that held a
  cached Gaussian goes through `np.random.set_state` (the rare case: a loop drawing single
  Gaussians from NumPy's global generator).

The raw layout (uint32 key[624], int pos) is checked against `get_state()` on first use; where
it does not match (another NumPy, another bit generator) every swap takes the `get_state` /
`set_state` path, which is exact and only slower.
"""

from __future__ import annotations

import ctypes
import random
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["CpuState", "capture", "restore"]

_KEY_WORDS = 624
_RAW_BYTES = _KEY_WORDS * 4 + 4  # uint32 key[624], then int pos


class _NumpyState(NamedTuple):
    raw: bytes | None  # MT19937 key and pos as they lie in memory (None: the slow path's tuple)
    has_gauss: int
    gauss: float
    legacy: Any = None  # np.random.get_state()'s tuple, on the slow path


class CpuState(NamedTuple):
    """The three CPU generators' states, as `capture()` took them."""

    python: Any
    numpy: _NumpyState
    torch: torch.Tensor


class _Raw:
    """A writable view of NumPy's global MT19937 state, or None where its layout is unknown."""

    def __init__(self) -> None:
        self.generator: Any = None
        self.view: memoryview | None = None

    def current(self) -> memoryview | None:
        generator = getattr(np.random.mtrand._rand, "_bit_generator", None)
        if generator is not self.generator:  # first use, or the global generator was replaced
            self.generator, self.view = generator, _raw_view(generator)
        return self.view


def _raw_view(generator: Any) -> memoryview | None:
    """The MT19937 state's bytes in place, if they read back as `get_state()` says."""
    try:
        address = generator.ctypes.state_address
        view = memoryview((ctypes.c_char * _RAW_BYTES).from_address(address)).cast("B")
        legacy: Any = np.random.get_state(legacy=True)
        raw = bytes(view)
        words = np.frombuffer(raw[: _KEY_WORDS * 4], dtype=np.uint32)
        pos = int.from_bytes(raw[_KEY_WORDS * 4 :], "little", signed=True)
    except (AttributeError, TypeError, ValueError):
        return None
    ok = (type(generator).__name__ == "MT19937" and legacy[0] == "MT19937"
          and np.array_equal(words, legacy[1]) and pos == legacy[2])
    return view if ok else None


_raw = _Raw()


def _capture_numpy() -> _NumpyState:
    view = _raw.current()
    if view is None:
        return _NumpyState(None, 0, 0.0, np.random.get_state(legacy=True))
    with _raw.generator.lock:  # the lock NumPy's own draws take
        raw = bytes(view)
    probe = float(np.random.standard_normal())
    if bytes(view) == raw:  # served from the cache without drawing: the state held it
        return _NumpyState(raw, 1, probe)
    return _NumpyState(raw, 0, 0.0)


def _restore_numpy(state: _NumpyState) -> None:
    view = _raw.current()
    if state.raw is None or view is None or state.has_gauss:
        np.random.set_state(state.legacy if state.raw is None else _legacy(state))
        return
    before = bytes(view)
    np.random.standard_normal()
    if bytes(view) != before:  # it drew a pair and cached the second: take that one too
        np.random.standard_normal()
    with _raw.generator.lock:
        view[:] = state.raw


def _legacy(state: _NumpyState) -> tuple[str, np.ndarray[Any, Any], int, int, float]:
    assert state.raw is not None
    words = np.frombuffer(state.raw[: _KEY_WORDS * 4], dtype=np.uint32).copy()
    pos = int.from_bytes(state.raw[_KEY_WORDS * 4 :], "little", signed=True)
    return "MT19937", words, pos, state.has_gauss, state.gauss


def capture() -> CpuState:
    """The CPU generators' states; leaves NumPy's in an unspecified state (seed or restore it
    next)."""
    return CpuState(random.getstate(), _capture_numpy(), torch.get_rng_state())


def restore(state: CpuState) -> None:
    """Put back what `capture()` returned: the next draws repeat exactly."""
    random.setstate(state.python)
    _restore_numpy(state.numpy)
    torch.set_rng_state(state.torch)
