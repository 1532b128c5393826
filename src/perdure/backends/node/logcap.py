"""A replica's log files under a size cap: past it, the oldest output goes and the tail stays.

A replica that prints in a loop would fill the disk, and with it the state dir every other
job needs. Each of its log files (stdout, stderr, both merged) is trimmed in place when it
passes `max_bytes` (`$PERDURE_LOG_MAX_MB` of the controller, default 64 MiB per file): the
newest half is moved to the front after a line saying how much was dropped, and the file is
cut there. The log relay (logrelay), which writes the files as the bytes arrive, trims a file
right after the write that took it over the cap, so no file is ever over it by more than one
write (64 KiB, or a 1 MiB partial line) nor over it at all once that write is done, however
soon the replica exits; nothing is lost but the dropped head. A launch without a relay (the
replica holds the files itself) is trimmed by its supervisor about once a second and once more
after the exit; output written during a trim may be lost there. The file keeps its name and
inode, so `perdure logs` and the Ray mirror go on reading it; a reader that followed it past
its new end starts again from the top.

Side effects: reads, rewrites and truncates the given files.
"""

from __future__ import annotations

import os

ENV = "PERDURE_LOG_MAX_MB"
DEFAULT_MB = 64
MAX_MB = 1 << 20  # a TiB: beyond it the cap is no cap
MARK = b"=== perdure: %d earlier bytes of this log were dropped (log cap %d MiB, $%b) ===\n"
CHUNK = 1 << 20


def max_bytes(value: str | int | None = None) -> int:
    """The cap in bytes from an argument or `$PERDURE_LOG_MAX_MB`: whole MiB from 1 to 2^20;
    ValueError naming the value otherwise."""
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
    """Everything from `start` to the end, including what was appended while reading."""
    parts: list[bytes] = []
    offset = start
    while chunk := os.pread(fd, CHUNK, offset):
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)
