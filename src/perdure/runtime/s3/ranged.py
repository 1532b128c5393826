"""A seekable read-only stream over one S3 object, made of ranged GETs.

A large ``readinto`` is fetched straight into the caller's buffer (a tensor's memory, for a
restore) in parallel parts, and the next stretch of the same length is fetched ahead while
the caller works on this one (restore reads a shard front to back). Small reads (archive
headers) are served from one cached block.

Side effects: network I/O through the S3Client.
"""

from __future__ import annotations

import io
from concurrent.futures import Future
from typing import Any

from perdure.runtime.s3.client import S3Client

BLOCK = 256 << 10  # reads under this are served from a cached block of this size
AHEAD_MIN = 1 << 20  # reads this large start fetching the next stretch ahead


class RangedStream(io.RawIOBase):
    """``path`` (``size`` bytes) through ``client``."""

    def __init__(self, client: S3Client, path: str, size: int) -> None:
        self.client, self.path, self.size = client, path, size
        self._pos = 0
        self._block: tuple[int, bytes] | None = None
        self._ahead: tuple[int, int, Future[bytearray]] | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self.size - self._pos)
        if n <= 0:
            return 0
        start = self._pos
        if n < BLOCK:
            self._small(start, view[:n])
        elif not self._from_ahead(start, view[:n]):
            self.client.read_into(self.path, start, view[:n])
        if n >= AHEAD_MIN:
            self._fetch_ahead(start + n, n)
        self._pos += n
        return n

    def _small(self, start: int, view: memoryview) -> None:
        if self._block is None or not (
            self._block[0] <= start and start + len(view) <= self._block[0] + len(self._block[1])
        ):
            length = min(BLOCK, self.size - start)
            data = bytearray(length)
            self.client.read_into(self.path, start, memoryview(data))
            self._block = (start, bytes(data))
        at = start - self._block[0]
        view[:] = self._block[1][at : at + len(view)]

    def _from_ahead(self, start: int, view: memoryview) -> bool:
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return False
        a_start, a_len, job = ahead
        if a_start != start or a_len < len(view):
            job.cancel()
            return False
        view[:] = memoryview(job.result())[: len(view)]
        return True

    def _fetch_ahead(self, start: int, length: int) -> None:
        length = min(length, self.size - start)
        if length <= 0 or self._ahead is not None:
            return
        self._ahead = (start, length, self.client.submit(self._fetch, start, length))

    def _fetch(self, start: int, length: int) -> bytearray:
        data = bytearray(length)
        self.client.read_into(self.path, start, memoryview(data))
        return data

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead[2].cancel()
            self._ahead = None
        super().close()
