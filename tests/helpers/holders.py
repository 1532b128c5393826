"""A snapshot holder's payload fetched whole, for tests that store raw bytes (not codec.py's)."""

from __future__ import annotations

from collections.abc import Callable

from perdure.runtime.elastic import holder as hd


def fetch_bytes(addr: hd.HolderAddress, replica: str, step: int, *, secret: str) -> bytearray:
    def whole(read_into: Callable[[memoryview], None], size: int) -> bytearray:
        buf = bytearray(size)
        read_into(memoryview(buf))
        return buf

    return hd.fetch(addr, replica, step, whole, secret=secret)
