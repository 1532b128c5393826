"""A replica's log files under a size cap: past it, the oldest output goes and the tail stays.

A file over `max_bytes` (`$PERDURE_LOG_MAX_MB`, default 64 MiB) is trimmed in place to its
newest half after a line saying how much was dropped; it keeps its inode, so readers go on.
"""

from __future__ import annotations

import os

ENV = "PERDURE_LOG_MAX_MB"
DEFAULT_MB = 64
MAX_MB = 1 << 20  # a TiB: beyond it the cap is no cap
MARK = b"=== perdure: %d earlier bytes of this log were dropped (log cap %d MiB, $%b) ===\n"
CHUNK = 1 << 20


def max_bytes(value: str | int | None = None) -> int:
    """The cap in bytes from an argument or `$PERDURE_LOG_MAX_MB` (whole MiB)."""
    raw = os.environ.get(ENV, str(DEFAULT_MB)) if value is None else value
    try:
        mb = int(raw)
    except ValueError:
        mb = 0
    if not 1 <= mb <= MAX_MB:
        raise ValueError(f"log cap {raw!r} (${ENV}) must be a whole number of MiB from 1 to "
                         f"{MAX_MB}: each replica's stdout and stderr are trimmed to it")
    return mb << 20


def trim(path: str, limit: int) -> tuple[int, int]:
    """Cut `path` to its newest half if it is over `limit` bytes. Returns (shift, mark): a
    byte that was at offset X >= the cut is now at X - shift, and the kept output begins at
    `mark`; (0, 0) when nothing was cut (under the cap, unreadable, vanished)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return 0, 0
    try:
        size = os.fstat(fd).st_size
        if size <= limit:
            return 0, 0
        keep = max(1, limit // 2)
        start = size - keep
        head = os.pread(fd, min(4096, keep), start)
        newline = head.find(b"\n")
        if 0 <= newline < len(head) - 1:  # begin at a line
            start += newline + 1
        tail = _read_from(fd, start)
        mark = MARK % (start, limit >> 20, ENV.encode())
        os.pwrite(fd, mark + tail, 0)
        os.ftruncate(fd, len(mark) + len(tail))
        return start - len(mark), len(mark)
    except OSError:
        return 0, 0
    finally:
        os.close(fd)


def _read_from(fd: int, start: int) -> bytes:
    parts: list[bytes] = []
    offset = start
    while chunk := os.pread(fd, CHUNK, offset):
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)
