"""A read-only, seekable raw stream over `size` bytes: the position bookkeeping that a reader
of a file window or of a remote object shares; subclasses implement `readinto`.

No side effects.
"""

from __future__ import annotations

import io


class SeekableReader(io.RawIOBase):
    """Position in [0, size] (`clamp`: a seek past the end stops at it; else only at 0)."""

    def __init__(self, size: int, *, clamp: bool = True) -> None:
        self.size, self._clamp, self._pos = size, clamp, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        if self._clamp:
            self._pos = min(self.size, self._pos)
        return self._pos
