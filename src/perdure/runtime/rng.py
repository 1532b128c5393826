"""Capture, restore and seed every random generator a training script uses.

The state is plain values and tensors, storable without pickle; it belongs to one process, so
store it under a key that names the rank. Layout of `rng_state()` (version 1)::

    {
      "version": 1,
      "python": {"version": int,            # random.getstate()[0]
                 "state": int64 tensor [625],  # the Mersenne Twister words and position
                 "has_gauss_next": bool, "gauss_next": float},
      "numpy":  {"bit_generator": "MT19937",
                 "key": int64 tensor [624],  # uint32 words widened to int64
                 "pos": int, "has_gauss": int, "cached_gaussian": float},
      "torch":  uint8 tensor,               # torch.get_rng_state()
      "cuda":   [uint8 tensor, ...],        # one per visible CUDA device; [] without CUDA
    }
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import numpy as np
import torch

__all__ = ["derive_seed", "rng_state", "seed_everything", "set_rng_state"]

STATE_VERSION = 1
_SEED_LIMIT = 2**64
_MASK32 = 0xFFFFFFFF


def derive_seed(*parts: int) -> int:
    """Mix integers (seed, epoch, rank, ...) into one 64-bit seed, the same in every release."""
    digest = hashlib.blake2b(digest_size=8, person=b"perdure-seed")
    for part in parts:
        digest.update(int(part).to_bytes(16, "little", signed=True))
    return int.from_bytes(digest.digest(), "little")


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    if not 0 <= seed < _SEED_LIMIT:
        raise ValueError(
            f"seed must be in [0, 2**64), got {seed}; pass a non-negative 64-bit integer"
        )
    return seed


def seed_everything(seed: int) -> int:
    """Seed Python `random`, NumPy's global generator and torch (CPU and every CUDA device).

    Returns the seed. Seeds must be integers in [0, 2**64).
    """
    seed_cpu_generators(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device, lazily
    return seed


def seed_cpu_generators(seed: int) -> None:
    """Seed Python, NumPy and torch's CPU generator only (data workers; leaves CUDA alone)."""
    _check_seed(seed)
    random.seed(seed)
    # 32-bit words: a wider seed goes in as two, a small one as the one other tools use
    np.random.seed(seed if seed <= _MASK32 else [seed & _MASK32, seed >> 32])
    torch.default_generator.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Capture every generator's state as plain values and tensors (layout: module docstring)."""
    version, words, gauss_next = random.getstate()
    name, key, pos, has_gauss, cached = np.random.get_state(legacy=True)  # type: ignore[misc]
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return {
        "version": STATE_VERSION,
        "python": {
            "version": int(version),
            "state": torch.tensor(words, dtype=torch.int64),
            "has_gauss_next": gauss_next is not None,
            "gauss_next": float(gauss_next) if gauss_next is not None else 0.0,
        },
        "numpy": {
            "bit_generator": str(name),
            "key": torch.from_numpy(np.asarray(key, dtype=np.int64).copy()),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state().clone(),
        "cuda": [state.clone() for state in cuda],
    }


def _as_ints(value: Any, what: str) -> list[int]:
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.tolist()]
    if isinstance(value, (list, tuple, np.ndarray)):
        return [int(v) for v in value]
    raise TypeError(f"rng state field {what} must be a tensor or a list of ints, got {value!r}")


def _as_byte_tensor(value: Any, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device="cpu", dtype=torch.uint8).contiguous()
    if isinstance(value, (list, tuple)):
        return torch.tensor(list(value), dtype=torch.uint8)
    raise TypeError(f"rng state field {what} must be a uint8 tensor, got {type(value).__name__}")


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore every generator from a `rng_state()` value; the next draws repeat exactly."""
    if not isinstance(state, dict):
        raise TypeError(f"set_rng_state expects the dict rng_state() returned, got {state!r}")
    version = state.get("version")
    if version != STATE_VERSION:
        raise ValueError(
            f"rng state version {version!r} is not supported; this perdure reads version "
            f"{STATE_VERSION}. Restore with the perdure release that wrote it."
        )
    missing = {"python", "numpy", "torch", "cuda"} - set(state)
    if missing:
        raise ValueError(f"rng state is missing {sorted(missing)}; pass what rng_state() made")
    py, npy = state["python"], state["numpy"]
    gauss = float(py["gauss_next"]) if py["has_gauss_next"] else None
    random.setstate((int(py["version"]), tuple(_as_ints(py["state"], "python.state")), gauss))
    key = np.asarray(_as_ints(npy["key"], "numpy.key"), dtype=np.uint32)
    np.random.set_state((str(npy["bit_generator"]), key, int(npy["pos"]),
                         int(npy["has_gauss"]), float(npy["cached_gaussian"])))
    torch.set_rng_state(_as_byte_tensor(state["torch"], "torch"))
    if torch.cuda.is_available():  # the devices that exist, of those the state was saved on
        cuda = list(state["cuda"])
        for device in range(min(len(cuda), torch.cuda.device_count())):
            torch.cuda.set_rng_state(_as_byte_tensor(cuda[device], f"cuda[{device}]"), device)
