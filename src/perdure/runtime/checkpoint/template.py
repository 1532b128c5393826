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
from collections.abc import Hashable
from dataclasses import dataclass
from typing import IO

import torch

from perdure.runtime import compat
from perdure.runtime.checkpoint.fastread import memory_of, payload_span

Key = Hashable
# Only tensors up to this size get a skeleton: the Python cost of torch.save is fixed per
# tensor, so it matters for small ones only, and learning a layout serialises the tensor and a
# probe of it in memory (three copies of its bytes), which must stay small.
MAX_BYTES = 256 << 10
_MAX_BUFFERS = 1 << 16


def save_tensor(tensor: object, stream: IO[bytes]) -> None:
    """``torch.save(tensor, stream)`` (of a tensor or a plain value) without the CRC-32, and
    without changing torch's global setting for it (`compat.save_without_crc`)."""
    compat.save_without_crc(tensor, stream)


@dataclass(frozen=True)
class Skeleton:
    """The bytes of a layout's archive before and after its storage's raw bytes."""

    head: bytes
    tail: bytes


Pieces = tuple[bytes, memoryview, bytes]
"""A tensor's archive: its skeleton's head, the tensor's raw bytes, its skeleton's tail."""


class Skeletons:
    """Skeletons by layout, for one set of staged buffers (a writer keeps one per plan)."""

    def __init__(self) -> None:
        self._known: dict[Key, Skeleton | None] = {}  # None: this layout cannot use one
        # id(buffer) -> (the buffer, its data pointer, shape, strides, its archive's pieces):
        # a plan writes the same buffers at every save, so each one's layout is worked out once
        self._buffers: dict[int, tuple[torch.Tensor, int, Key, Pieces | None]] = {}

    def __len__(self) -> int:
        return len(self._known)

    def pieces(self, tensor: torch.Tensor, alignment: int) -> Pieces | None:
        """``tensor``'s archive as (skeleton head, its raw bytes, skeleton tail), or None when
        it has no skeleton (as ``get``)."""
        seen = self._buffers.get(id(tensor))
        shape = (tuple(tensor.shape), tensor.stride(), alignment)
        if (seen is not None and seen[0] is tensor and seen[1] == tensor.data_ptr()
                and seen[2] == shape):
            return seen[3]
        skeleton = self.get(tensor, alignment)
        raw = memory_of(tensor) if skeleton is not None else None
        pieces = None if skeleton is None or raw is None else (skeleton.head, raw, skeleton.tail)
        if len(self._buffers) >= _MAX_BUFFERS:  # not a plan's fixed buffers: keep no memory
            self._buffers.clear()
        self._buffers[id(tensor)] = (tensor, tensor.data_ptr(), shape, pieces)
        return pieces

    def get(self, tensor: torch.Tensor, alignment: int) -> Skeleton | None:
        """The skeleton for ``tensor``'s layout (built on first sight), or None when the tensor
        or its layout must be written by ``save_tensor`` itself. alignment: torch's storage
        alignment setting now (``compat.storage_alignment()``)."""
        key = layout_key(tensor, alignment)
        if key is None:
            return None
        if key not in self._known:
            self._known[key] = build(tensor)
        return self._known[key]


class ValueArchives:
    """``save_tensor`` archives of plain values (scalars and sequences of them: no tensors),
    made from their pickle.

    Such an archive is the value's pickle (protocol 2, as torch writes it) between bytes that
    depend only on the pickle's length: serialising a step counter with torch costs ~25 us, its
    pickle under 1 us, on the training thread (a counter, a data cursor and a learning rate
    change at every save). The bytes around a pickle of each type and length are learnt from
    torch's archive of one value, and used once torch's archive of a second, different value of
    that type and length is exactly them around its pickle (proven, not assumed); until then,
    and for ever where it is not, torch writes each archive.
    """

    def __init__(self) -> None:
        # (type, pickle length, alignment) -> (skeleton, the pickle it was learnt from,
        # proven); None: this kind of archive is not its pickle between fixed bytes
        self._known: dict[tuple[type, int, int], tuple[Skeleton, bytes, bool] | None] = {}

    def archive(self, value: object) -> bytes:
        """The bytes ``save_tensor(value)`` writes, for a plain value without tensors."""
        pickled = pickle.dumps(value, protocol=torch.serialization.DEFAULT_PROTOCOL)
        # torch's alignment setting is one of the archive's records
        key = (type(value), len(pickled), compat.storage_alignment())
        seen = key in self._known
        known = self._known.get(key)
        if known is not None and known[2]:
            return known[0].head + pickled + known[0].tail
        saved = _saved(value)
        if not seen:
            at = saved.find(pickled)
            self._known[key] = (None if at < 0 else
                                (Skeleton(saved[:at], saved[at + len(pickled):]), pickled, False))
        elif known is not None and pickled != known[1]:
            skeleton = known[0]
            proven = saved == skeleton.head + pickled + skeleton.tail
            self._known[key] = (skeleton, known[1], True) if proven else None
        return saved


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


def _saved(value: object) -> bytes:
    out = io.BytesIO()
    save_tensor(value, out)
    return out.getvalue()
