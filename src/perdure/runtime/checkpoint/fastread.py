"""Read a tensor straight from a checkpoint file into the tensor that restores it.

Each tensor item of a shard is one uncompressed ``torch.save`` archive whose single storage
record holds the tensor's bytes in row-major order. When the bytes a restore needs are one
contiguous run of that record and of the destination, they are read with ``readinto`` into the
destination's memory; anything else takes DCP's path.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
from typing import IO, Any

import torch

from perdure.runtime.checkpoint import checksum
from perdure.runtime.seekable import SeekableReader

_SLICE = 8 << 20
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_LOCAL_SIG = 0x04034B50
_STORAGE = re.compile(r"(^|/)data/\d+$")


class _Window(SeekableReader):
    """The bytes [start, start + length) of a seekable stream, as a stream of its own."""

    def __init__(self, stream: IO[bytes], start: int, length: int) -> None:
        super().__init__(length)
        self._stream, self._start, self._length = stream, start, length

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._length - self._pos)
        if want <= 0:
            return 0
        self._stream.seek(self._start + self._pos)
        got = self._stream.readinto(view[:want])  # type: ignore[attr-defined]
        self._pos += got or 0
        return got or 0


def payload_span(stream: IO[bytes], start: int, length: int) -> tuple[int, int] | None:
    """(offset within the item, size) of the one storage record of the torch.save archive at
    ``start``, or None when the item is not a single stored (uncompressed) storage."""
    window = _Window(stream, start, length)
    try:
        with zipfile.ZipFile(io.BufferedReader(window, 1 << 16)) as archive:
            records = [i for i in archive.infolist() if _STORAGE.search(i.filename)]
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
    if len(records) != 1 or records[0].compress_type != zipfile.ZIP_STORED:
        return None
    record = records[0]
    window.seek(record.header_offset)
    head = window.read(_LOCAL.size)
    if head is None or len(head) != _LOCAL.size:
        return None
    fields = _LOCAL.unpack(head)
    if fields[0] != _LOCAL_SIG:
        return None
    data = record.header_offset + _LOCAL.size + fields[9] + fields[10]
    return data, record.file_size


def _fill(stream: IO[bytes], view: memoryview) -> None:
    done = 0
    while done < len(view):
        got = stream.readinto(view[done:])  # type: ignore[attr-defined]
        if not got:
            raise EOFError(f"checkpoint file ended {len(view) - done} bytes early")
        done += got


def read_checked(
    stream: IO[bytes], start: int, length: int, span: tuple[int, int], target: torch.Tensor,
    algorithm: str,
) -> int | None:
    """Read the whole item at ``start``, its payload ``span`` straight into ``target``, and
    return the checksum of every byte read, each slice hashed while in cache; None (nothing
    read) when ``target`` is not contiguous CPU memory of the payload's size."""
    head, size = span
    if (target.device.type != "cpu" or not target.is_contiguous()
            or target.numel() * target.element_size() != size or head < 0
            or head + size > length):
        return None
    view = target.reshape(-1).view(torch.uint8).numpy().data.cast("B")
    stream.seek(start)
    crc = checksum.update(algorithm, 0, _read_exact(stream, head))
    for at in range(0, size, _SLICE):
        part = view[at : at + _SLICE]
        _fill(stream, part)
        crc = checksum.update(algorithm, crc, part)
    return checksum.update(algorithm, crc, _read_exact(stream, length - head - size))


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError(f"checkpoint file ended {n - len(data)} bytes early")
    return data
