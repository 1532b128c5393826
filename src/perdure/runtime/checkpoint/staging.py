"""Reusable host buffers: the only copy training waits for.

Buffers are allocated once per save plan (and pre-touched, since first-touch page faults make
a copy into fresh memory ~17x slower) and reused by every later save with the same layout.
A rank stages only the items its plan assigns to it: with DDP, replicated tensors are split
between ranks, so each rank copies about 1/world of the state.

``shared=True`` puts the buffers in one memfd that a writer process maps too (process mode);
the file has no name, so a crash leaks nothing.

Side effects: allocates memory; ``stage`` copies from the live state into the buffers.
"""

from __future__ import annotations

import io
import itertools
import mmap
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.checkpoint.planner import WriteItem, WriteItemType
from torch.distributed.checkpoint.utils import find_state_dict_object

from perdure.runtime.checkpoint.shared import Slot, view_slot

_ALIGN = 64
_GENERATIONS = itertools.count(1)


@dataclass
class StagedItem:
    """One write item of this rank: a staged tensor, or the serialised bytes of a plain value."""

    item: WriteItem
    tensor: torch.Tensor | None = None
    data: bytes | None = None


class HostBuffers:
    """Pre-touched host tensors for the tensor items of one plan."""

    def __init__(self, items: list[WriteItem], *, shared: bool, pin: bool) -> None:
        self.generation = next(_GENERATIONS)  # tells a writer process these are new buffers
        self.tensors: dict[MetadataIndex, torch.Tensor] = {}
        self.slots: dict[MetadataIndex, Slot] = {}
        self.fd: int | None = None
        self._map: mmap.mmap | None = None
        tensor_items = [i for i in items if i.type != WriteItemType.BYTE_IO]
        if shared:
            self._allocate_shared(tensor_items)
        else:
            for item in tensor_items:
                assert item.tensor_data is not None
                dtype = item.tensor_data.properties.dtype
                shape = tuple(item.tensor_data.chunk.sizes)
                self.tensors[item.index] = torch.empty(shape, dtype=dtype, pin_memory=pin).zero_()

    def _allocate_shared(self, items: list[WriteItem]) -> None:
        total = 0
        for item in items:
            assert item.tensor_data is not None
            dtype = item.tensor_data.properties.dtype
            shape = tuple(int(s) for s in item.tensor_data.chunk.sizes)
            nbytes = _numel(shape) * torch.empty((), dtype=dtype).element_size()
            self.slots[item.index] = Slot(total, nbytes, dtype, shape)
            total += -(-nbytes // _ALIGN) * _ALIGN
        self.fd = os.memfd_create("perdure-checkpoint-staging")
        os.ftruncate(self.fd, max(total, _ALIGN))
        self._map = mmap.mmap(self.fd, max(total, _ALIGN))
        for index, slot in self.slots.items():
            self.tensors[index] = view_slot(self._map, slot)
            self.tensors[index].zero_()  # pre-touch the pages

    def stage(self, flat: dict[str, Any], items: list[WriteItem]) -> list[StagedItem]:
        """Copy this rank's items from the live (flattened) state into the buffers."""
        staged: list[StagedItem] = []
        device_copy = False
        for item in items:
            if item.type == WriteItemType.BYTE_IO:
                out = io.BytesIO()
                torch.save(flat[item.index.fqn], out)
                staged.append(StagedItem(item, data=out.getvalue()))
                continue
            src = find_state_dict_object(flat, item.index)
            dst = self.tensors[item.index]
            device_copy = device_copy or src.device.type != "cpu"
            dst.copy_(src.detach(), non_blocking=src.device.type != "cpu")
            staged.append(StagedItem(item, tensor=dst))
        if device_copy and torch.cuda.is_available():
            torch.cuda.synchronize()
        return staged

    def close(self) -> None:
        """Release the memory (tensors handed out before must not be used afterwards)."""
        self.tensors.clear()
        if self._map is not None:
            self._map.close()
            self._map = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
