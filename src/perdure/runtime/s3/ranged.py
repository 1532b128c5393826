"""A seekable read-only stream over one S3 object, made of ranged GETs.

Large reads go straight into the caller's buffer in parallel parts, with the next stretches
fetched ahead; small reads (an archive's headers) come from a few cached blocks. With a
``plan`` of the ranges to read (a restore), read-ahead stops at each range's end and small
ranges are fetched whole, ahead of use: for small items the requests are what costs.
"""

from __future__ import annotations

import bisect
from collections import deque
from concurrent.futures import Future
from typing import Any

from perdure.runtime.s3.client import S3Client
from perdure.runtime.seekable import SeekableReader

BLOCK = 64 << 10  # reads under this are served from cached blocks of this size
AHEAD_MIN = 1 << 20  # reads this large start fetching the next stretches ahead
_BLOCKS = 4
WHOLE_MAX = 32 << 20  # planned ranges up to this size are fetched whole, ahead of use


class RangedStream(SeekableReader):
    """``path`` (``size`` bytes) through ``client``."""

    def __init__(self, client: S3Client, path: str, size: int, depth: int = 4) -> None:
        super().__init__(size, clamp=False)
        self.client, self.path, self.depth = client, path, depth
        self._blocks: deque[tuple[int, bytes]] = deque(maxlen=_BLOCKS)
        self._ahead: deque[tuple[int, int, Future[bytearray]]] = deque()
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._whole: dict[int, Future[bytearray]] = {}  # planned range index -> its bytes

    def plan(self, spans: list[tuple[int, int]]) -> None:
        """The (offset, length) ranges the caller will read, in any order."""
        ordered = sorted(spans)
        self._starts = [s for s, _ in ordered]
        self._ends = [s + n for s, n in ordered]

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self.size - self._pos)
        if n <= 0:
            return 0
        start = self._pos
        if self._from_whole(start, view[:n]):
            self._pos += n
            return n
        if n < BLOCK:
            self._small(start, view[:n])
        elif not self._from_ahead(start, view[:n]):
            self.client.read_into(self.path, start, view[:n])
        if n >= AHEAD_MIN:
            self._fetch_ahead(start + n, n)
        self._pos += n
        return n

    def _from_whole(self, start: int, view: memoryview) -> bool:
        """Serve a read inside a small planned range from its bytes; False when it is not one."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0 or start + len(view) > self._ends[i] or (
                self._ends[i] - self._starts[i] > WHOLE_MAX):
            return False
        for done in [k for k in self._whole if k < i]:  # the reader moved past them
            del self._whole[done]
        for k in range(i, min(i + self.depth, len(self._starts))):
            if k not in self._whole and self._ends[k] - self._starts[k] <= WHOLE_MAX:
                self._whole[k] = self.client.submit(
                    self._fetch, self._starts[k], self._ends[k] - self._starts[k])
        at = start - self._starts[i]
        view[:] = memoryview(self._whole[i].result())[at : at + len(view)]
        return True

    def _span(self, at: int) -> tuple[int, int]:
        """The planned range holding byte ``at`` (the whole object when none does)."""
        i = bisect.bisect_right(self._starts, at) - 1
        if i >= 0 and at < self._ends[i]:
            return self._starts[i], self._ends[i]
        return 0, self.size

    def _small(self, start: int, view: memoryview) -> None:
        end = start + len(view)
        block = next((b for b in self._blocks if b[0] <= start and end <= b[0] + len(b[1])),
                     None)
        if block is None:
            lo, hi = self._span(start)
            # Near a range's end: its tail (a zip's directory); near its start: its head.
            first = max(lo, hi - BLOCK) if start >= hi - BLOCK else (
                lo if start - lo < BLOCK // 2 else start)
            length = max(min(BLOCK, self.size - first), end - first)
            data = bytearray(length)
            self.client.read_into(self.path, first, memoryview(data))
            block = (first, bytes(data))
            self._blocks.append(block)
        at = start - block[0]
        view[:] = block[1][at : at + len(view)]

    def _from_ahead(self, start: int, view: memoryview) -> bool:
        while self._ahead and self._ahead[0][0] != start:
            self._ahead.popleft()[2].cancel()  # the reader went elsewhere
        if not self._ahead or self._ahead[0][1] < len(view):
            self._drop_ahead()
            return False
        _, _, job = self._ahead.popleft()
        view[:] = memoryview(job.result())[: len(view)]
        return True

    def _fetch_ahead(self, start: int, length: int) -> None:
        _, end = self._span(start - 1)
        at = self._ahead[-1][0] + self._ahead[-1][1] if self._ahead else start
        while len(self._ahead) < self.depth and end - at >= BLOCK:  # less: a small read
            n = min(length, end - at)
            self._ahead.append((at, n, self.client.submit(self._fetch, at, n)))
            at += n

    def _fetch(self, start: int, length: int) -> bytearray:
        data = bytearray(length)
        self.client.read_into(self.path, start, memoryview(data))
        return data

    def _drop_ahead(self) -> None:
        while self._ahead:
            self._ahead.popleft()[2].cancel()

    def close(self) -> None:
        self._drop_ahead()
        for job in self._whole.values():
            job.cancel()
        self._whole.clear()
        super().close()
