"""Write one rank's shard file in DCP's format: each item ``torch.save``d at a recorded offset.

This is what DCP's ``FileSystemWriter`` writes with ``single_file_per_rank=True``, so stock DCP
reads it; it writes from the staged buffers, whose storages hold exactly their own bytes.
Tensors are saved without the zip CRC-32 (torch's own ``compute_crc32=False`` format, which
``torch.load`` reads; it never checks the CRC): computing it costs ~0.3 s of CPU per GiB, taken
from training. Every payload's checksum is computed as it is written (restore verifies it).
Imports only torch, so that the writer process can use it without loading DCP.

Side effects: writes and fsyncs one file.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from perdure.runtime import compat
from perdure.runtime.checkpoint import checksum, modes

__all__ = ["Written", "save_tensor", "shard_name", "write_payloads"]

_SLICE = 4 << 20  # hashed, then written, while in cache
# A tensor up to this size is serialised into memory and written in one piece: torch's zip
# writer makes ~40 small writes per tensor, each a Python call through the hashing stream, and
# the whole file's checksum then takes these bytes directly (hashing them twice costs less
# than one pure-Python ``combine`` below this size). Larger tensors stream, as before.
SMALL = 256 << 10


def save_tensor(value: object, stream: IO[bytes]) -> None:
    """``torch.save(value, stream)`` (a tensor or a plain value) without the CRC-32, and
    without changing torch's global setting for it (`compat.save_without_crc`)."""
    compat.save_without_crc(value, stream)


def shard_name(rank: int) -> str:
    """The file a rank writes, named as DCP names it."""
    return f"__{rank}_0.distcp"


class _HashingStream:
    """A write-only file that checksums what passes through it, in slices small enough to be
    hashed while still in cache, so that the checksum costs no second pass over memory."""

    def __init__(self, stream: IO[bytes], algorithm: str) -> None:
        self._stream = stream
        self.algorithm = algorithm
        self.crc = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), _SLICE):
            part = view[start : start + _SLICE]
            self.crc = checksum.update(self.algorithm, self.crc, part)
            self._stream.write(part)
        return len(view)

    def flush(self) -> None:
        self._stream.flush()


def _small_bytes(payload: torch.Tensor | bytes) -> bytes | memoryview | None:
    """The bytes to write for a small payload (a serialised value, a tensor); None for a
    large one."""
    if isinstance(payload, bytes):
        return payload if len(payload) <= SMALL else None
    if payload.untyped_storage().nbytes() > SMALL:
        return None
    buffer = io.BytesIO()
    save_tensor(payload, buffer)
    return buffer.getbuffer()


@dataclass(frozen=True)
class Written:
    """What ``write_payloads`` wrote: each payload's (offset, length, checksum), the file's
    size and the whole file's checksum."""

    spans: list[tuple[int, int, int]]
    size: int
    crc: int


def write_payloads(
    path: Path, payloads: list[torch.Tensor | bytes], *, fsync: bool, algorithm: str,
) -> Written:
    """Write tensors (``torch.save``d) and serialised values in order to ``path``, checksumming
    each payload's bytes as they are written (``algorithm``: see checksum.py)."""
    spans: list[tuple[int, int, int]] = []
    whole = 0
    small: list[bytes | memoryview] = []  # small archives in a row, not yet written
    gathered = 0  # their bytes
    with modes.create(path) as stream:  # 0600 in a private directory
        for payload in payloads:
            data = _small_bytes(payload)
            if data is not None:
                small.append(data)
                gathered += len(data)
                if gathered >= _SLICE:
                    whole, gathered = _write_small(stream, small, algorithm, whole, spans), 0
                continue
            whole, gathered = _write_small(stream, small, algorithm, whole, spans), 0
            start = stream.tell()
            hashing = _HashingStream(stream, algorithm)
            if isinstance(payload, bytes):
                hashing.write(payload)
            else:
                save_tensor(payload, hashing)  # type: ignore[arg-type]
            length = stream.tell() - start
            spans.append((start, length, hashing.crc))
            whole = checksum.combine(algorithm, whole, hashing.crc, length)
        whole = _write_small(stream, small, algorithm, whole, spans)
        stream.flush()
        if fsync:
            os.fsync(stream.fileno())
        size = stream.tell()
    return Written(spans, size, whole)


def _write_small(
    stream: IO[bytes], small: list[bytes | memoryview], algorithm: str, whole: int,
    spans: list[tuple[int, int, int]],
) -> int:
    """Write the small archives gathered in ``small`` in one piece (and empty it): each one's
    span and checksum goes to ``spans``; returns the file's checksum extended by them."""
    if not small:
        return whole
    start = stream.tell()
    data = b"".join(small)
    view = memoryview(data)
    at = 0
    for archive in small:
        length = len(archive)
        spans.append((start + at, length, checksum.update(algorithm, 0, view[at:at + length])))
        at += length
    stream.write(data)
    small.clear()
    return checksum.update(algorithm, whole, data)
