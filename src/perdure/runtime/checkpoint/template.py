"""The bytes ``torch.save`` writes around a staged tensor's data, built once per layout.

A tensor item of a shard is one ``torch.save`` archive of a staged buffer: a contiguous CPU
tensor that owns exactly its storage, written without the zip CRC-32 (writer.py). Such an
archive is a fixed skeleton (the pickle, the zip headers, the records after the data) around
the storage's raw bytes: only the layout (dtype, shape, strides, size) and torch's settings
decide the skeleton, never the values. So the first write of a small tensor's layout (up to
MAX_BYTES) serialises it with torch and keeps the bytes before and after the data; every later
write of that layout writes head + raw bytes + tail, with no pickling and no zip writer: the
same bytes, for ~1/4 of the CPU (a small save's persist thread otherwise spends most of its
time in ``torch.save``).

The skeleton is proven, not assumed: it is kept only when a probe (the same layout with every
byte inverted) serialises to exactly head + inverted bytes + tail; otherwise (a torch that
checksums the data, a storage that is not the tensor's own) that layout keeps using torch.save.

No side effects.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import IO

import torch

from perdure.runtime.checkpoint.fastread import memory_of, payload_span

Key = Hashable
# Only tensors up to this size get a skeleton: the Python cost of torch.save is fixed per
# tensor, so it matters for small ones only, and learning a layout serialises the tensor and a
# probe of it in memory (three copies of its bytes), which must stay small.
MAX_BYTES = 256 << 10


def save_tensor(tensor: torch.Tensor, stream: IO[bytes]) -> None:
    """``torch.save(tensor, stream)`` without the CRC-32, and without changing torch's global
    setting for it (the training thread may be saving too). Falls back to plain torch.save if
    torch's internals differ from what this expects."""
    try:
        writer = torch._C.PyTorchFileWriter(
            stream, False, torch.serialization._get_storage_alignment()
        )
        save: Callable[..., None] = torch.serialization._save
    except (AttributeError, TypeError):
        torch.save(tensor, stream)
        return
    save(tensor, writer, pickle, torch.serialization.DEFAULT_PROTOCOL, False)
    writer.write_end_of_file()


@dataclass(frozen=True)
class Skeleton:
    """The bytes of a layout's archive before and after its storage's raw bytes."""

    head: bytes
    tail: bytes


class Skeletons:
    """Skeletons by layout, for one set of staged buffers (a writer keeps one per plan)."""

    def __init__(self) -> None:
        self._known: dict[Key, Skeleton | None] = {}  # None: this layout cannot use one

    def __len__(self) -> int:
        return len(self._known)

    def get(self, tensor: torch.Tensor, alignment: int) -> Skeleton | None:
        """The skeleton for ``tensor``'s layout (built on first sight), or None when the tensor
        or its layout must be written by ``save_tensor`` itself. alignment: torch's storage
        alignment setting now (``torch.serialization._get_storage_alignment()``)."""
        key = layout_key(tensor, alignment)
        if key is None:
            return None
        if key not in self._known:
            self._known[key] = build(tensor)
        return self._known[key]


def layout_key(tensor: torch.Tensor, alignment: int) -> Key | None:
    """What a tensor's archive depends on besides its bytes, for tensors whose archive is a
    skeleton around them (a plain contiguous CPU tensor owning exactly its storage, with no
    autograd state or Python attributes, of at most MAX_BYTES); None for any other. No side
    effects."""
    if (type(tensor) is not torch.Tensor or tensor.device.type != "cpu"
            or tensor.layout != torch.strided or tensor.requires_grad
            or tensor.storage_offset() != 0 or not tensor.is_contiguous()
            or tensor.is_conj() or tensor.is_neg() or tensor.__dict__):
        return None
    nbytes = tensor.untyped_storage().nbytes()
    if nbytes != tensor.numel() * tensor.element_size() or nbytes > MAX_BYTES:
        return None
    return (tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()), nbytes, alignment)


def build(tensor: torch.Tensor) -> Skeleton | None:
    """Serialise ``tensor`` and a probe of the same layout (every byte inverted); the skeleton
    when both archives are it around their raw bytes, else None."""
    raw = memory_of(tensor)
    if raw is None:
        return None
    first = _saved(tensor)
    span = payload_span(io.BytesIO(first), 0, len(first))
    if span is None or span[1] != len(raw) or first[span[0]:span[0] + span[1]] != raw:
        return None
    skeleton = Skeleton(first[:span[0]], first[span[0] + span[1]:])
    probe = torch.empty_like(tensor)
    torch.bitwise_not(tensor.reshape(-1).view(torch.uint8), out=probe.reshape(-1).view(torch.uint8))
    inverted = memory_of(probe)
    assert inverted is not None
    if _saved(probe) != skeleton.head + inverted + skeleton.tail:
        return None
    return skeleton


def _saved(tensor: torch.Tensor) -> bytes:
    out = io.BytesIO()
    save_tensor(tensor, out)
    return out.getvalue()
