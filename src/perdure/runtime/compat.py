"""Every torch API that differs between the supported versions, or is private, in one place.

What the installed torch offers (the versions of `perdure.versions`) is detected from what it
has (``hasattr``, a trial import or call), never from its version string; each name's docstring
says which versions take which path. DCP's pieces are imported on first use, so that importing
this module costs torch alone.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist

all_gather_single: Callable[..., Any] = getattr(
    dist, "all_gather_single", None) or dist.all_gather_into_tensor
"""``all_gather_single(output, input, group=None, async_op=False)``: every rank's ``input``,
concatenated into ``output`` (2.13 on; ``all_gather_into_tensor``, the same call, before)."""


def dedup_save_plans(plans: list[Any], save_to_lowest_rank: bool) -> list[Any]:
    """DCP's deduplication of the items several ranks' plans hold (as DDP replicates
    parameters): each is left in one plan. Private, the same in 2.6-2.14."""
    from torch.distributed.checkpoint._dedup_save_plans import dedup_save_plans as dedup

    return dedup(plans, save_to_lowest_rank=save_to_lowest_rank)


def storage_info(file: str, offset: int, length: int) -> Any:
    """DCP's record of where an item lies in a checkpoint's files (private, the same in
    2.6-2.14; perdure's checkpoints are DCP checkpoints, so they name it)."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    return _StorageInfo(file, offset, length)


_DCP_VERSION = "1.0.0"  # the format version DCP's writer records (2.7-2.14)


def versioned(md: Any) -> Any:
    """DCP's Metadata ``md`` with the format version DCP's own writer records (2.7 on; 2.6's
    Metadata has no such field). No side effects."""
    if "version" not in {f.name for f in dataclasses.fields(md)}:
        return md
    return dataclasses.replace(md, version=_DCP_VERSION)


def dcp_load(state: dict[str, Any], reader: Any, planner: Any, process_group: Any,
             no_dist: bool) -> None:
    """DCP's load of ``state`` in place from ``reader``; ``no_dist``: by this process alone,
    through ``load(no_dist=True)`` (2.7 on) or 2.6's deprecated ``load_state_dict``."""
    from torch.distributed.checkpoint import state_dict_loader as dcp

    parameters = inspect.signature(dcp.load).parameters
    if no_dist and "no_dist" not in parameters:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            dcp.load_state_dict(state, reader, no_dist=True, planner=planner)
        return
    options = {"no_dist": no_dist} if "no_dist" in parameters else {}
    dcp.load(state, storage_reader=reader, planner=planner, process_group=process_group,
             **options)


def narrow(tensor: torch.Tensor, offsets: Sequence[int], lengths: Sequence[int]) -> torch.Tensor:
    """``tensor`` cut to ``lengths`` from ``offsets`` in each dimension (a view; torch's own
    helper is private). No side effects."""
    for dim, (start, length) in enumerate(zip(offsets, lengths, strict=True)):
        if start != 0 or length != tensor.size(dim):
            tensor = tensor.narrow(dim, start, length)
    return tensor


def pin_memory(data: Any) -> Any:
    """``data`` (a batch: tensors in lists, dicts, ...) in page-locked memory, as the
    DataLoader's pinning thread makes it (its helper is private in 2.6-2.14)."""
    try:
        from torch.utils.data._utils.pin_memory import pin_memory as pin_batch
    except ImportError:
        return data.pin_memory() if isinstance(data, torch.Tensor) else data
    return pin_batch(data)  # type: ignore[no-untyped-call]


def _cudart() -> Any:
    if not torch.cuda.is_available():
        return None
    try:
        return torch.cuda.cudart()  # type: ignore[no-untyped-call]
    except (AttributeError, RuntimeError):
        return None


def host_register(ptr: int, nbytes: int) -> bool:
    """Page-lock ``nbytes`` of host memory at ``ptr`` for CUDA copies; whether it was (not
    where there is no CUDA or no such call: copies then still work, synchronously)."""
    cudart = _cudart()
    register = getattr(cudart, "cudaHostRegister", None)
    return register is not None and int(register(ptr, nbytes, 0)) == 0


def host_unregister(ptr: int) -> None:
    """Undo `host_register`."""
    unregister = getattr(_cudart(), "cudaHostUnregister", None)
    if unregister is not None:
        unregister(ptr)


def rendezvous_handlers() -> dict[str, Callable[..., Any]] | None:
    """torch's rendezvous handlers by URL scheme, to wrap one in place (private in 2.6-2.14;
    the public register call refuses to replace one); None where torch keeps them otherwise."""
    module = importlib.import_module("torch.distributed.rendezvous")
    handlers = getattr(module, "_rendezvous_handlers", None)
    return handlers if isinstance(handlers, dict) else None


WARM_IMPORTS = ("torch", "torch._dynamo", "torch.nn.parallel", "torch.distributed.checkpoint")
"""What a warm start imports ahead of a training script: the seconds-long imports of torch,
including ``torch._dynamo`` (DDP's constructor imports it)."""


def preload(names: Iterable[str]) -> list[str]:
    """Import each module of ``names`` that imports cleanly here; return those skipped (missing
    in this torch, or failing to import: the script then imports them itself, or not)."""
    skipped = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:
            skipped.append(name)
    return skipped
