"""Tensors over a shared staging buffer, and dtype names: what the writer process needs too,
importing nothing but torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Slot:
    """Where one tensor item lives in a shared buffer."""

    offset: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]


def view_slot(buffer: Any, slot: Slot) -> torch.Tensor:
    """A tensor over ``slot`` of a mapped buffer, with a storage of exactly its own bytes."""
    if slot.nbytes == 0:
        return torch.empty(slot.shape, dtype=slot.dtype)
    raw = torch.frombuffer(buffer, dtype=torch.uint8, count=slot.nbytes, offset=slot.offset)
    return raw.view(slot.dtype).view(slot.shape)


def dtype_name(dtype: torch.dtype) -> str:
    """'float32' for torch.float32."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    """Inverse of dtype_name; refuses anything that is not a torch dtype."""
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"checkpoint metadata names dtype {name!r}, which is not a torch dtype")
    return value
