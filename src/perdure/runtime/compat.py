"""Every torch API that differs between the supported versions, or is private, in one place.

perdure supports the torch versions of `perdure.versions` (``import perdure`` refuses
others). What the installed torch offers is detected once, from what it has (``hasattr``, a
trial import or call), never from its version string; each name below says which versions
take which path:

- ``all_gather_single``: ``dist.all_gather_single`` (2.13 on); ``dist.all_gather_into_tensor``
  before it (the same call; 2.13 deprecated it).
- ``save_without_crc``: ``torch.save`` of a value without the zip CRC-32 and without touching
  torch's global CRC setting (other threads may be saving). Through torch's private zip writer
  (``torch._C.PyTorchFileWriter`` and ``torch.serialization._save``), which takes the storage
  alignment as a third argument from 2.7 on and not in 2.6; where neither form works, plain
  ``torch.save`` (with the CRC-32: the same archive format, readable by every version).
DCP's own pieces are imported on first use (the checkpoint writer process imports this module
with torch alone).

- ``dedup_save_plans``: DCP's deduplication of replicated items
  (``torch.distributed.checkpoint._dedup_save_plans``, private, the same in 2.6-2.14).
- ``storage_info``: where DCP's file-system writer records an item (``filesystem._StorageInfo``,
  private, the same in 2.6-2.14): perdure's checkpoints are DCP checkpoints, so they name it.
- ``fqn``: the name torch's distributed state dicts give a module's state-dict key (DDP's
  ``module.`` and torch.compile's ``_orig_mod.`` dropped): ``state_dict._get_fqns`` (private, in
  2.6-2.14); elsewhere the same names from the module tree (``_fqn_from_modules``).
- ``versioned``: DCP's Metadata with its format version (the ``version`` field, 2.7 on; 2.6's
  Metadata has none and is left as it is).
- ``dcp_load``: DCP's ``load`` into a state dict; alone (``no_dist``: no collective, whatever
  the process group) through ``load(no_dist=True)`` (2.7 on) or, in 2.6, whose ``load`` has no
  such option and gathers whenever a group exists, the deprecated ``load_state_dict``, which
  has it.
- ``narrow``: a tensor cut to a DCP read item's offsets and lengths, with ``Tensor.narrow``
  (torch's own helper is in the private ``torch.distributed._shard``).
- ``foreach_copy``: ``torch._foreach_copy_`` (one C call for many copies, 2.6-2.14), else a
  loop of ``copy_``.
- ``pin_memory``: DataLoader's recursive pinning of a batch (``torch.utils.data._utils``,
  private in 2.6-2.14), else a tensor's ``pin_memory()``.
- ``host_register``/``host_unregister``: page-locking memory that torch did not allocate, for
  CUDA copies (``torch.cuda.cudart()``); False (not pinned: copies still work, synchronously)
  where there is no CUDA or the call is missing.
- ``fsdp2_trains_on_cpu``: whether FSDP2 (``fully_shard``) can run a forward pass on CPU
  tensors: its all-gather records an event on the CPU stream, which torch 2.6's CPU stream
  cannot do (2.7 on can). perdure saves and restores FSDP2 state on every version; training
  FSDP2 on CPU (gloo) needs 2.7, on CUDA any.
- ``rendezvous_handlers``: torch's registry of init_process_group's rendezvous handlers by
  URL scheme (``torch.distributed.rendezvous._rendezvous_handlers``, private, 2.6-2.14; the
  public ``register_rendezvous_handler`` refuses to replace one); None where it is missing.
- ``WARM_IMPORTS``: what a warm start imports ahead of a script: ``torch._dynamo`` (which DDP's
  constructor imports) where it imports cleanly; a module missing or failing is skipped.

Side effects: none at import beyond importing torch; each detection runs once, on first use.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import io
import pickle
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any

import torch
import torch.distributed as dist
from torch import nn

# ---- collectives ---------------------------------------------------------------------------

all_gather_single: Callable[..., Any] = getattr(
    dist, "all_gather_single", None) or dist.all_gather_into_tensor
"""``all_gather_single(output, input, group=None, async_op=False)``: every rank's ``input``,
concatenated into ``output``."""


# ---- torch.save without the CRC-32 ---------------------------------------------------------

def _writer_with_alignment(stream: IO[bytes]) -> Any:
    return torch._C.PyTorchFileWriter(stream, False, storage_alignment())


def _writer_without_alignment(stream: IO[bytes]) -> Any:
    return torch._C.PyTorchFileWriter(stream, False)


def _private_save(writer_of: Callable[[IO[bytes]], Any], value: object,
                  stream: IO[bytes]) -> None:
    writer = writer_of(stream)
    torch.serialization._save(  # type: ignore[attr-defined,no-untyped-call]
        value, writer, pickle, torch.serialization.DEFAULT_PROTOCOL, False)
    writer.write_end_of_file()


def _plain_save(value: object, stream: IO[bytes]) -> None:
    torch.save(value, stream)


def _detect_save() -> Callable[[object, IO[bytes]], None]:
    """The first way of saving that writes, for a probe tensor, an archive that ``torch.load``
    reads back to the same values; plain ``torch.save`` when none does."""
    probe = torch.arange(5, dtype=torch.float32)
    for writer_of in (_writer_with_alignment, _writer_without_alignment):
        save = functools.partial(_private_save, writer_of)
        out = io.BytesIO()
        try:
            save(probe, out)
            back = torch.load(io.BytesIO(out.getvalue()), weights_only=True)
        except (AttributeError, TypeError, RuntimeError):
            continue
        if isinstance(back, torch.Tensor) and torch.equal(back, probe):
            return save
    return _plain_save


@functools.cache
def _save_way() -> Callable[[object, IO[bytes]], None]:
    return _detect_save()


def save_without_crc(value: object, stream: IO[bytes]) -> None:
    """``torch.save(value, stream)`` without computing the zip CRC-32 where torch allows it
    (see the module docstring); the archive loads with ``torch.load`` on every version."""
    _save_way()(value, stream)


def storage_alignment() -> int:
    """The alignment of tensor data in torch.save's archives: torch's setting (2.7 on), or the
    fixed 64 bytes of 2.6."""
    setting = getattr(torch.serialization, "_get_storage_alignment", None)
    return 64 if setting is None else int(setting())


def save_path() -> str:
    """Which way `save_without_crc` writes here: "aligned" (2.7 on), "unaligned" (2.6) or
    "torch.save"."""
    way = _save_way()
    if way is _plain_save:
        return "torch.save"
    assert isinstance(way, functools.partial)
    return "aligned" if way.args[0] is _writer_with_alignment else "unaligned"


# ---- DCP's private pieces --------------------------------------------------------------------

# Imported on first use: the writer process imports this module with torch alone.

def dedup_save_plans(plans: list[Any], save_to_lowest_rank: bool) -> list[Any]:
    """DCP's deduplication of the items several ranks' plans hold (as DDP replicates
    parameters): each is left in one plan."""
    from torch.distributed.checkpoint._dedup_save_plans import dedup_save_plans as dedup

    return dedup(plans, save_to_lowest_rank=save_to_lowest_rank)


def storage_info(file: str, offset: int, length: int) -> Any:
    """DCP's record of where an item lies in a checkpoint's files."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    return _StorageInfo(file, offset, length)


_DCP_VERSION = "1.0.0"  # the format version DCP's writer records (2.7-2.14)


def versioned(md: Any) -> Any:
    """DCP's Metadata ``md`` with the format version DCP's own writer records, where Metadata
    has that field. No side effects."""
    if "version" not in {f.name for f in dataclasses.fields(md)}:
        return md
    return dataclasses.replace(md, version=_DCP_VERSION)


def dcp_load(state: dict[str, Any], reader: Any, planner: Any, process_group: Any,
             no_dist: bool) -> None:
    """DCP's load of ``state`` in place from ``reader``; ``no_dist``: by this process alone."""
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
    """``tensor`` cut to ``lengths`` from ``offsets`` in each dimension (a view). No side
    effects."""
    for dim, (start, length) in enumerate(zip(offsets, lengths, strict=True)):
        if start != 0 or length != tensor.size(dim):
            tensor = tensor.narrow(dim, start, length)
    return tensor


# ---- state-dict names ------------------------------------------------------------------------

def _private_fqns() -> Callable[[nn.Module, str], Any] | None:
    try:
        from torch.distributed.checkpoint.state_dict import _get_fqns
    except ImportError:
        return None
    return _get_fqns  # type: ignore[no-any-return]


_WRAPPED = {"module": "DistributedDataParallel", "_orig_mod": "OptimizedModule",
            "_checkpoint_wrapped_module": "CheckpointWrapper",
            "_fsdp_wrapped_module": "FullyShardedDataParallel"}


def _fqn_from_modules(model: nn.Module, key: str) -> str:
    """``key`` with each wrapper's own attribute dropped (DDP's ``module``, torch.compile's
    ``_orig_mod``, activation checkpointing's and FSDP1's wrapped modules), found by walking
    the module tree. No side effects."""
    names: list[str] = []
    current: Any = model
    for part in key.split("."):
        wrapper = _WRAPPED.get(part)
        skip = wrapper is not None and wrapper in {c.__name__ for c in type(current).__mro__}
        if not skip:
            names.append(part)
        current = getattr(current, part, None) if isinstance(current, nn.Module) else None
    return ".".join(names)


def fqn(model: nn.Module, key: str) -> str:
    """The name torch's distributed state dicts (``get_model_state_dict``) give ``key`` of
    ``model.state_dict()``. No side effects."""
    private = _fqns()
    if private is None:
        return _fqn_from_modules(model, key)
    return str(next(iter(private(model, key))))


@functools.cache
def _fqns() -> Callable[[nn.Module, str], Any] | None:
    return _private_fqns()


# ---- copies and pinned memory ---------------------------------------------------------------

def foreach_copy(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    """``target.copy_(source)`` for each pair, in one C call where torch has it."""
    many = getattr(torch, "_foreach_copy_", None)
    if many is not None:
        many(targets, sources)
        return
    for target, source in zip(targets, sources, strict=True):
        target.copy_(source)


def pin_memory(data: Any) -> Any:
    """``data`` (a batch: tensors in lists, dicts, ...) in page-locked memory, as the
    DataLoader's pinning thread makes it."""
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
    """Page-lock ``nbytes`` of host memory at ``ptr`` for CUDA copies; whether it was."""
    cudart = _cudart()
    register = getattr(cudart, "cudaHostRegister", None)
    return register is not None and int(register(ptr, nbytes, 0)) == 0


def host_unregister(ptr: int) -> None:
    """Undo `host_register`."""
    unregister = getattr(_cudart(), "cudaHostUnregister", None)
    if unregister is not None:
        unregister(ptr)


def fsdp2_trains_on_cpu() -> bool:
    """Whether FSDP2 can train on CPU tensors with this torch (see the module docstring)."""
    return hasattr(torch.cpu.Stream, "record_event")


# ---- rendezvous -----------------------------------------------------------------------------

def rendezvous_handlers() -> dict[str, Callable[..., Any]] | None:
    """torch's rendezvous handlers by URL scheme, to wrap one in place; None where torch keeps
    them otherwise."""
    module = importlib.import_module("torch.distributed.rendezvous")
    handlers = getattr(module, "_rendezvous_handlers", None)
    return handlers if isinstance(handlers, dict) else None


# ---- warm starts ----------------------------------------------------------------------------

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
