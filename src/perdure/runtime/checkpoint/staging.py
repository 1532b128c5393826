"""Reusable host buffers: the only copy training waits for, and only part of it.

Buffers are allocated (and pre-touched: first-touch page faults make a copy into fresh memory
several times slower) once per save plan and reused by every save with the same layout; a rank
stages only the items its plan assigns to it.

Tensors that only an optimizer changes need not be copied before ``save`` returns: their copies
are left to the background while a StepGate holds that optimizer's next ``step()``. Each
source's version counter, read at ``save`` and after its copy, catches any other in-place
change, and that save fails.

``shared=True`` puts the buffers in one nameless memfd that a writer process maps too.
"""

from __future__ import annotations

import io
import itertools
import math
import mmap
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.checkpoint.planner import WriteItem, WriteItemType
from torch.distributed.checkpoint.utils import find_state_dict_object

from perdure.runtime import compat
from perdure.runtime.checkpoint.errors import CheckpointError
from perdure.runtime.checkpoint.shared import Slot, view_slot

_ALIGN = 64
_GENERATIONS = itertools.count(1)


@dataclass(frozen=True)
class Pending:
    """A copy into the buffers left for the background (its source's version checks it)."""

    fqn: str
    src: torch.Tensor
    dst: torch.Tensor
    version: int


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
        self.pinned_bytes = 0  # of the shared mapping, page-locked for CUDA
        self.tensors: dict[MetadataIndex, torch.Tensor] = {}
        self.slots: dict[MetadataIndex, Slot] = {}
        self.fd: int | None = None
        self._map: mmap.mmap | None = None
        self._registered: int | None = None  # the memfd mapping's address, if CUDA pinned it
        tensor_items = [i for i in items if i.type != WriteItemType.BYTE_IO]
        if shared:
            self._allocate_shared(tensor_items)
            if pin:
                self._pin_shared()
        else:
            for item in tensor_items:
                assert item.tensor_data is not None
                dtype = item.tensor_data.properties.dtype
                shape = tuple(item.tensor_data.chunk.sizes)
                self.tensors[item.index] = torch.empty(shape, dtype=dtype, pin_memory=pin).zero_()
        # Every save of the plan stages the same StagedItem for a tensor (its buffer).
        self._staged = [StagedItem(item, tensor=self.tensors.get(item.index)) for item in items]
        self._values = [(n, i) for n, i in enumerate(items) if i.type == WriteItemType.BYTE_IO]
        self._tensor_items = tensor_items
        self._copies = [self.tensors[item.index] for item in tensor_items]

    def _allocate_shared(self, items: list[WriteItem]) -> None:
        total = 0
        for item in items:
            assert item.tensor_data is not None
            dtype = item.tensor_data.properties.dtype
            shape = tuple(int(s) for s in item.tensor_data.chunk.sizes)
            nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            self.slots[item.index] = Slot(total, nbytes, dtype, shape)
            total += -(-nbytes // _ALIGN) * _ALIGN
        self.fd = os.memfd_create("perdure-checkpoint-staging")
        os.ftruncate(self.fd, max(total, _ALIGN))
        self._map = mmap.mmap(self.fd, max(total, _ALIGN))
        for index, slot in self.slots.items():
            self.tensors[index] = view_slot(self._map, slot)
            self.tensors[index].zero_()  # pre-touch the pages

    def _pin_shared(self) -> None:
        """Page-lock the shared mapping for CUDA copies, as pin_memory does private buffers."""
        assert self._map is not None
        base = torch.frombuffer(self._map, dtype=torch.uint8)
        ptr = base.data_ptr()
        if compat.host_register(ptr, base.numel()):
            self.pinned_bytes = base.numel()
            self._registered = ptr

    def stage(
        self, flat: dict[str, Any], defer: frozenset[int] = frozenset()
    ) -> tuple[list[StagedItem], list[Pending]]:
        """Copy this rank's items from the live (flattened) state into the buffers, except CPU
        tensors whose storage is in ``defer``: those are returned as pending copies, when
        they are worth a hand-off."""
        staged = list(self._staged)
        for n, item in self._values:  # each plain value serialised as it is now
            staged[n] = StagedItem(item, data=_archive(flat[item.index.fqn]))
        pending = self._copy_each(flat, defer)
        if worth_deferring(pending):
            return staged, pending
        copy_pending(pending)
        return staged, []

    def _copy_each(self, flat: dict[str, Any], defer: frozenset[int]) -> list[Pending]:
        """Copy the tensor items one by one, except those of ``defer``: returned, pending."""
        pending: list[Pending] = []
        devices: set[torch.device] = set()  # GPUs copied from without waiting (non_blocking)
        for item, dst in zip(self._tensor_items, self._copies, strict=True):
            src = find_state_dict_object(flat, item.index).detach()  # shares the version counter
            if type(src) is torch.Tensor and src.device.type == "cpu" and (
                src.untyped_storage().data_ptr() in defer
            ):
                pending.append(Pending(item.index.fqn, src, dst, src._version))
            else:
                # A device tensor is copied asynchronously (into pinned memory when the
                # buffers are pinned); the synchronize below makes it whole before save returns.
                if src.device.type == "cuda":
                    devices.add(src.device)
                dst.copy_(src, non_blocking=src.device.type == "cuda")
        for device in devices:  # every GPU a copy came from, not only the current one
            torch.cuda.synchronize(device)
        return pending

    def close(self) -> None:
        """Release the memory (tensors handed out before must not be used afterwards)."""
        self.tensors.clear()
        if self._registered is not None:
            compat.host_unregister(self._registered)
            self._registered = None
        if self._map is not None:
            self._map.close()
            self._map = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _archive(value: Any) -> bytes:
    """The ``torch.save`` archive of a plain value."""
    out = io.BytesIO()
    torch.save(value, out)
    return out.getvalue()


# Deferred copies go to a thread of their own, and the optimizer's next step waits for them:
# worth the hand-offs only when the copies take longer than those.
DEFER_MIN_BYTES = 1 << 20
DEFER_MIN_TENSORS = 64


def worth_deferring(pending: list[Pending]) -> bool:
    """Whether copies are large or many enough to leave to the background. No side effects."""
    return (len(pending) >= DEFER_MIN_TENSORS
            or sum(p.dst.untyped_storage().nbytes() for p in pending) >= DEFER_MIN_BYTES)


def copy_pending(pending: list[Pending]) -> None:
    """Make the pending copies; raise if a source changed before its copy was done."""
    for p in pending:
        p.dst.copy_(p.src)
        if p.src._version != p.version:
            raise CheckpointError(
                f"state tensor {p.fqn!r} was changed in place between save() and the "
                "optimizer's next step, while it was being staged; this save is abandoned. "
                "Change optimizer-owned tensors only in optimizer.step(), or pass "
                "Checkpointer(stage='sync')."
            )


class StepGate:
    """Holds each optimizer's next ``step()`` until the pending copies are done (``waited_s``)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self._open = threading.Event()
        self.waited_s = 0.0
        self._handles = [o.register_step_pre_hook(self._hold) for o in optimizers]

    def _hold(self, *args: object) -> None:
        if not self._open.is_set():
            start = time.perf_counter()
            self._open.wait()
            self.waited_s += time.perf_counter() - start

    def open(self) -> None:
        """Let the optimizers step (called by the background, also when staging failed)."""
        self._open.set()

    def remove(self) -> None:
        """Unregister the hooks (training thread only: never while a step runs its hooks)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []


def optimizer_storages(state: Any) -> tuple[list[torch.optim.Optimizer], frozenset[int]]:
    """The optimizers of a state and the data pointers of every tensor they change."""
    optimizers = [v for v in (getattr(w, "value", w) for w in state.values())
                  if isinstance(v, torch.optim.Optimizer)]
    ptrs: set[int] = set()
    for optim in optimizers:
        for group in optim.param_groups:
            ptrs.update(_storage(p) for p in group["params"])
        for per_param in optim.state.values():
            ptrs.update(_storage(v) for v in per_param.values() if isinstance(v, torch.Tensor))
    ptrs.discard(0)
    return optimizers, frozenset(ptrs)


def _storage(tensor: torch.Tensor) -> int:
    """The data pointer of a plain CPU tensor's storage; 0 for anything else (a DTensor's
    shards, device tensors), which is then copied before save() returns."""
    if not (isinstance(tensor, torch.Tensor) and type(tensor.data) is torch.Tensor
            and tensor.device.type == "cpu"):
        return 0
    return int(tensor.untyped_storage().data_ptr())
