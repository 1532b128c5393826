"""Swap the CPU generators' states (Python, NumPy, torch) around data work, in microseconds.

The main-process loader swaps the training loop's generator states out, and a batch's seeded
states in, once per batch. `np.random.get_state()` / `set_state()` copy MT19937's 624 key words
one by one (about 35 us each), and `random.getstate()` / `setstate()` build and parse a tuple
of 625 ints (~100k instructions a batch); here both Mersenne Twisters are saved and restored as
the raw bytes of their state with one memcpy each.

Python's `random`: the C part of `random._inst` (CPython's RandomObject: int index, then
uint32 state[624], right after the object header), plus its `gauss_next` attribute.

NumPy's global generator: its MT19937 state (key and pos), at the bit generator's ctypes state
address, and its one other piece of state, the legacy cached Gaussian (`has_gauss`, `gauss`)
in the RandomState object itself, at an offset found once on a private RandomState (the same
class: a draw caches a Gaussian there, whose bytes are then looked up). Where that offset is
not found, the cached Gaussian is read and cleared through NumPy's own `standard_normal()`:

- reading: draw one `standard_normal()`. If the MT bytes did not move, it returned the cached
  Gaussian (which the state then held); if they moved, nothing was cached. Either way the
  generator is left in an unspecified state, so `capture` is always followed by a seed or a
  `restore` (as `isolated_seed` and `CpuRngSlot` do);
- restoring a state without a cached Gaussian: clear the cache (one or two `standard_normal()`
  draws, until one leaves the MT bytes alone), then memcpy the bytes back. A state that held a
  cached Gaussian goes through `np.random.set_state` (the rare case: a loop drawing single
  Gaussians from NumPy's global generator).

All raw layouts are checked against `getstate()` / `get_state()` on first use; where one does
not match (another Python or NumPy, another bit generator) its swaps take the `getstate` /
`setstate` path, which is exact and only slower.

`seed_generators` seeds the three as `perdure.runtime.rng.seed_cpu_generators` does, to the
same states. For a seed of two 32-bit words (every derived batch seed) NumPy's
`np.random.seed([lo, hi])` is the costly part: its argument checks and array conversions
took ~50 us between training steps (bench/overhead.py, the data region), while
`random.seed(seed)` runs the very same MT19937 `init_by_array` over the same words [lo, hi]
(CPython splits an int into 32-bit words, low first) and leaves the same 624-word key with
the position at 624. So NumPy's state is copied from Python's and its cached Gaussian
cleared, as a `restore` does.
"""

from __future__ import annotations

import ctypes
import random
import struct
import sys
from typing import Any, NamedTuple

import numpy as np
import torch

from perdure.runtime.rng import seed_cpu_generators

__all__ = ["CpuState", "Watch", "capture", "restore", "seed_generators", "watchable"]

_KEY_WORDS = 624
_SEEDED_POS = struct.pack("<i", _KEY_WORDS)  # init_by_array leaves the key fully unused
_TWO_WORDS, _SEED_LIMIT = 1 << 32, 1 << 64
_RAW_BYTES = _KEY_WORDS * 4 + 4  # uint32 key[624], then int pos
_PY_HEADER = 16  # CPython's PyObject_HEAD on 64-bit builds: refcount, type
_PY_BYTES = 4 + _KEY_WORDS * 4  # RandomObject: int index, then uint32 state[624]
_GAUSS = struct.Struct("<i4xd")  # RandomState's aug_bitgen_t: int has_gauss, double gauss


class _PythonState(NamedTuple):
    raw: bytes | None  # RandomObject's index and state (None: `legacy` holds getstate())
    gauss_next: float | None
    legacy: Any = None


class _NumpyState(NamedTuple):
    raw: bytes | None  # MT19937 key and pos as they lie in memory (None: the slow path's tuple)
    has_gauss: int
    gauss: float
    legacy: Any = None  # np.random.get_state()'s tuple, on the slow path


class CpuState(NamedTuple):
    """The three CPU generators' states, as `capture()` took them."""

    python: _PythonState
    numpy: _NumpyState
    torch: torch.Tensor


class _Raw:
    """Writable views of NumPy's global generator: its MT19937 state, and its cached Gaussian
    (`has_gauss`, `gauss`); each None where its layout is unknown."""

    def __init__(self) -> None:
        self.generator: Any = None
        self.view: memoryview | None = None
        self.owner: Any = None  # the RandomState whose cached Gaussian `gauss_view` shows
        self.gauss_view: memoryview | None = None

    def current(self) -> memoryview | None:
        generator = getattr(np.random.mtrand._rand, "_bit_generator", None)
        if generator is not self.generator:  # first use, or the global generator was replaced
            self.generator, self.view = generator, _raw_view(generator)
        return self.view

    def cached_gauss(self) -> memoryview | None:
        owner = np.random.mtrand._rand
        if owner is not self.owner:
            self.owner, self.gauss_view = owner, _gauss_view(owner)
        return self.gauss_view


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


def _gauss_offset(kind: type) -> int | None:
    """Where a RandomState of class `kind` keeps `has_gauss` (an int, then the double `gauss`
    8 bytes on): found on a private instance, whose first Gaussian draw caches the second
    value of its pair, and checked again after the next draw empties the cache."""
    if sys.implementation.name != "cpython":
        return None
    probe: Any = kind(0)
    probe.standard_normal()
    cached = probe.get_state(legacy=True)
    if cached[3] != 1:
        return None
    needle, size = struct.pack("<d", cached[4]), kind.__basicsize__
    memory = ctypes.string_at(id(probe), size)
    for offset in range(_PY_HEADER, size - _GAUSS.size + 1, 8):
        fields = _GAUSS.unpack_from(memory, offset)
        if fields[0] == 1 and struct.pack("<d", fields[1]) == needle:
            probe.standard_normal()
            emptied = _GAUSS.unpack(ctypes.string_at(id(probe) + offset, _GAUSS.size))[0]
            return offset if emptied == 0 == probe.get_state(legacy=True)[3] else None
    return None


def _gauss_view(owner: Any) -> memoryview | None:
    """The cached Gaussian of NumPy's global RandomState in place, if it reads back as
    `get_state()` says."""
    try:
        offset = _gauss_offset(type(owner))
        legacy: Any = owner.get_state(legacy=True)
    except (AttributeError, TypeError, ValueError):
        return None
    if offset is None:
        return None
    view = memoryview((ctypes.c_char * _GAUSS.size).from_address(id(owner) + offset)).cast("B")
    has_gauss, gauss = _GAUSS.unpack(view)
    return view if has_gauss == legacy[3] and (not has_gauss or gauss == legacy[4]) else None


_raw = _Raw()


def _python_view() -> memoryview | None:
    """The C state of `random._inst` in place, if it reads back as `getstate()` says."""
    inst = random._inst  # type: ignore[attr-defined]
    base = type(inst).__mro__[-2]  # _random.Random, under random.Random
    if sys.implementation.name != "cpython" or base.__basicsize__ < _PY_HEADER + _PY_BYTES:
        return None
    view = memoryview((ctypes.c_char * _PY_BYTES).from_address(id(inst) + _PY_HEADER)).cast("B")
    raw = bytes(view)
    index, words = struct.unpack("<i", raw[:4])[0], struct.unpack(f"<{_KEY_WORDS}I", raw[4:])
    try:
        legacy = random.getstate()[1]
    except NotImplementedError:  # a generator without a state (SystemRandom)
        return None
    return view if words == legacy[:_KEY_WORDS] and index == legacy[_KEY_WORDS] else None


class _PythonRaw:
    """`random._inst`'s state bytes, found and checked once (None where the layout differs)."""

    def __init__(self) -> None:
        self.inst: Any = None
        self.view: memoryview | None = None

    def current(self) -> memoryview | None:
        inst = random._inst  # type: ignore[attr-defined]
        if inst is not self.inst:
            self.inst, self.view = inst, _python_view()
        return self.view


_py_raw = _PythonRaw()


def _capture_python() -> _PythonState:
    view = _py_raw.current()
    if view is None:
        return _PythonState(None, None, random.getstate())
    return _PythonState(bytes(view), _py_raw.inst.gauss_next)


def _restore_python(state: _PythonState) -> None:
    view = _py_raw.current()
    if state.raw is None or view is None:
        random.setstate(state.legacy if state.raw is None else _python_legacy(state))
        return
    view[:] = state.raw  # a buffer copy under the GIL, as random's own methods run
    _py_raw.inst.gauss_next = state.gauss_next


def _python_legacy(state: _PythonState) -> tuple[int, tuple[int, ...], float | None]:
    assert state.raw is not None
    index = struct.unpack("<i", state.raw[:4])[0]
    words = struct.unpack(f"<{_KEY_WORDS}I", state.raw[4:])
    return random.Random.VERSION, (*words, index), state.gauss_next


def _capture_numpy() -> _NumpyState:
    view = _raw.current()
    if view is None:
        return _NumpyState(None, 0, 0.0, np.random.get_state(legacy=True))
    cached = _raw.cached_gauss()
    with _raw.generator.lock:  # the lock NumPy's own draws take
        raw = bytes(view)
        if cached is not None:
            return _NumpyState(raw, *_GAUSS.unpack(cached))
    probe = float(np.random.standard_normal())
    if bytes(view) == raw:  # served from the cache without drawing: the state held it
        return _NumpyState(raw, 1, probe)
    return _NumpyState(raw, 0, 0.0)


def _restore_numpy(state: _NumpyState) -> None:
    view, cached = _raw.current(), _raw.cached_gauss()
    if state.raw is None or view is None or (state.has_gauss and cached is None):
        np.random.set_state(state.legacy if state.raw is None else _legacy(state))
        return
    if cached is None:
        before = bytes(view)
        np.random.standard_normal()
        if bytes(view) != before:  # it drew a pair and cached the second: take that one too
            np.random.standard_normal()
    with _raw.generator.lock:
        view[:] = state.raw
        if cached is not None:
            _GAUSS.pack_into(cached, 0, state.has_gauss, state.gauss)


def _legacy(state: _NumpyState) -> tuple[str, np.ndarray[Any, Any], int, int, float]:
    assert state.raw is not None
    words = np.frombuffer(state.raw[: _KEY_WORDS * 4], dtype=np.uint32).copy()
    pos = int.from_bytes(state.raw[_KEY_WORDS * 4 :], "little", signed=True)
    return "MT19937", words, pos, state.has_gauss, state.gauss


def capture() -> CpuState:
    """The CPU generators' states. Unless `watchable()`, this leaves NumPy's in an unspecified
    state (seed or restore it next)."""
    return CpuState(_capture_python(), _capture_numpy(), torch.get_rng_state())


def watchable() -> bool:
    """Whether `capture()` reads all three generators in place without disturbing them, so
    that a `Watch` around some work tells whether the work drew."""
    return (_py_raw.current() is not None and _raw.current() is not None
            and _raw.cached_gauss() is not None)


class Watch:
    """Whether some work drew from the CPU generators, told from a few bytes of each state.

    The loader watches every fetch of a dataset that draws nothing, right after a training
    step, when a capture's copies of three whole states cost ~35 us (cold caches). A draw moves
    a generator's position (Python's index, NumPy's pos, torch's left/next), or, after a whole
    block, regenerates its key (the first and last words), or takes a cached Gaussian (the
    cache fields are read too); a reseed rewrites them all. So `before()`/`drew()` compare
    those marks, read with one struct call each, and copy Python's and NumPy's states only
    when their marks moved since the last copy (a training loop rarely draws from them;
    torch's, which dropout moves every step, is copied each time: ~4 us). Only where
    `watchable()`.
    """

    def __init__(self) -> None:
        self._kept: tuple[Any, _PythonState, _NumpyState] | None = None
        self._marks: Any = None

    def before(self) -> CpuState:
        """The states now, to `restore` if the work drew (Python's and NumPy's reused while
        their marks have not moved)."""
        marks, kept = _marks(), self._kept
        if kept is None or kept[0] != marks:
            kept = self._kept = (marks, _capture_python(), _capture_numpy())
        state = torch.get_rng_state()
        self._marks = (marks, _torch_marks(state))
        return CpuState(kept[1], kept[2], state)

    def drew(self) -> bool:
        """Whether anything drew since the last `before()`."""
        return bool((_marks(), _torch_marks(torch.get_rng_state())) != self._marks)


# The marks, each read in one call: Python's index, first and last key words; NumPy's first
# and last key words and pos; torch's state (THGeneratorStateNew): the seed, left, seeded,
# next and key word 0, then key word 623 and the cached normals.
_PY_MARKS = struct.Struct(f"<iI{_PY_BYTES - 12}xI")
_NP_MARKS = struct.Struct(f"<I{_RAW_BYTES - 12}xIi")
_TORCH_MARKS = struct.Struct(f"<32s{_KEY_WORDS * 8 - 16}x48s")


def _torch_marks(state: torch.Tensor) -> tuple[Any, ...]:
    return _TORCH_MARKS.unpack_from(state.numpy())  # type: ignore[arg-type]  # a buffer


def _marks() -> tuple[Any, ...]:
    python, numpy_view, cached = _py_raw.current(), _raw.current(), _raw.cached_gauss()
    assert python is not None and numpy_view is not None and cached is not None  # watchable()
    return (_PY_MARKS.unpack_from(python), _py_raw.inst.gauss_next,
            _NP_MARKS.unpack_from(numpy_view), _GAUSS.unpack(cached))


def restore(state: CpuState) -> None:
    """Put back what `capture()` returned: the next draws repeat exactly."""
    _restore_python(state.python)
    _restore_numpy(state.numpy)
    torch.set_rng_state(state.torch)


def seed_generators(value: int) -> None:
    """Seed Python's, NumPy's and torch's CPU generators exactly as `seed_cpu_generators(value)`
    does; NumPy's, for seeds of two words, by copying the key Python's seeding just made."""
    python, numpy_view = _py_raw.current(), _raw.current()
    two_words = isinstance(value, int) and not isinstance(value, bool) \
        and _TWO_WORDS <= value < _SEED_LIMIT
    if python is None or numpy_view is None or not two_words:
        seed_cpu_generators(value)  # one word: NumPy seeds differently (and fast); checks
        return
    random.seed(value)
    _restore_numpy(_NumpyState(bytes(python[4:]) + _SEEDED_POS, 0, 0.0))
    torch.default_generator.manual_seed(value)
