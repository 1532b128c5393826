"""Read a replica's log by byte offsets: a tail, a page before it, or what was appended."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CHUNK = 64 * 1024  # the most one read returns


@dataclass(frozen=True)
class LogChunk:
    """Bytes [offset, next_offset) of a log, decoded; `size` is the file's size when read."""

    offset: int
    next_offset: int
    size: int
    text: str
    exists: bool


def _complete_utf8(data: bytes) -> int:
    """How many leading bytes of `data` end on a whole UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b & 0xC0 != 0x80:  # a lead byte (or ASCII): does its sequence fit?
            need = 1 if b < 0x80 else 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4
            return len(data) if need <= back else len(data) - back
    return len(data)


def read_chunk(path: Path, offset: int | None, limit: int = CHUNK) -> LogChunk:
    """At most `limit` bytes from `offset` (negative: from the end; None: the tail, from a
    line's start), never ending inside a UTF-8 character."""
    limit = max(1, min(limit, CHUNK))
    try:
        f = path.open("rb")
    except (FileNotFoundError, NotADirectoryError):
        return LogChunk(0, 0, 0, "", exists=False)
    with f:
        size = f.seek(0, 2)
        tail = offset is None
        start = max(0, size - limit) if offset is None else max(0, min(
            size + offset if offset < 0 else offset, size))
        f.seek(start)
        data = f.read(min(limit, size - start))
    if tail and start > 0 and b"\n" in data[:-1]:
        cut = data.index(b"\n") + 1  # a tail starts at a line, not mid-way through one
        start, data = start + cut, data[cut:]
    data = data[:_complete_utf8(data)]
    return LogChunk(start, start + len(data), size, data.decode(errors="replace"), True)
