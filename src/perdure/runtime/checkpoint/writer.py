"""Write one rank's shard file in DCP's format (``FileSystemWriter`` with one file per rank),
checksumming each payload as it is written. Imports only torch, for the writer process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from perdure.runtime.checkpoint import checksum, modes

_SLICE = 4 << 20  # hashed, then written, while in cache


def shard_name(rank: int) -> str:
    """The file a rank writes, named as DCP names it."""
    return f"__{rank}_0.distcp"


class _HashingStream:
    """A write-only file that checksums what passes through it, a slice at a time, in cache."""

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


def _save(tensor: torch.Tensor, stream: _HashingStream) -> None:
    try:
        torch.save(tensor, stream)  # type: ignore[arg-type]
    except RuntimeError as exc:
        # Closing its archive after a failed write, torch raises its own error over the write's.
        if isinstance(exc.__context__, OSError):
            raise exc.__context__ from None
        raise


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
    """Write tensors (``torch.save``d) and serialised values in order to ``path``, each
    checksummed as it is written."""
    spans: list[tuple[int, int, int]] = []
    whole = 0
    with modes.create(path) as stream:  # 0600 in a private directory
        for payload in payloads:
            start = stream.tell()
            hashing = _HashingStream(stream, algorithm)
            if isinstance(payload, bytes):
                hashing.write(payload)
            else:
                _save(payload, hashing)
            length = stream.tell() - start
            spans.append((start, length, hashing.crc))
            whole = checksum.combine(algorithm, whole, hashing.crc, length)
        stream.flush()
        if fsync:
            os.fsync(stream.fileno())
        size = stream.tell()
    return Written(spans, size, whole)
