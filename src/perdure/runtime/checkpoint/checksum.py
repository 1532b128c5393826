"""Checksums of checkpoint files and of the items inside them: CRC-32C, or zlib's CRC-32.

A checkpoint names its algorithm, so either kind is verified by whichever reads it. Both are
CRCs, so a whole file's checksum is combined from its items' (``combine``) without hashing the
bytes twice.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from functools import cache
from typing import Any

import crc32c

CRC32C = "crc32c"
CRC32 = "crc32"  # what checkpoints of hosts without the crc32c package recorded
# The polynomials, reflected, as the combine arithmetic needs them.
_POLY = {CRC32C: 0x82F63B78, CRC32: 0xEDB88320}
_TOP = 1 << 31  # the polynomial x^0 in reflected form
# Each takes (data, crc); crc32c releases the GIL on large buffers.
_UPDATE: dict[str, Callable[[Any, int], int]] = {CRC32C: crc32c.crc32c, CRC32: zlib.crc32}

ALGORITHM = CRC32C
"""What new checkpoints record."""


def supported(algorithm: str) -> bool:
    """True when this process can compute ``algorithm``."""
    return algorithm in _UPDATE


def update(algorithm: str, crc: int, data: bytes | memoryview) -> int:
    """The checksum of what ``crc`` covered followed by ``data`` (start with crc 0)."""
    return int(_UPDATE[algorithm](data, crc))


def _multiply(algorithm: str, a: int, b: int) -> int:
    """a * b modulo the CRC's polynomial (both in reflected form)."""
    poly = _POLY[algorithm]
    m, product = _TOP, 0
    while True:
        if a & m:
            product ^= b
            if (a & (m - 1)) == 0:
                return product
        m >>= 1
        b = (b >> 1) ^ poly if b & 1 else b >> 1
        if m == 0:
            return product


@cache
def _power_table(algorithm: str) -> tuple[int, ...]:
    """x^(2^k) modulo the polynomial, k = 0..31."""
    table = [1 << 30]  # x^1
    for _ in range(31):
        table.append(_multiply(algorithm, table[-1], table[-1]))
    return tuple(table)


def combine(algorithm: str, crc1: int, crc2: int, len2: int) -> int:
    """The checksum of A followed by B, from A's checksum, B's and B's length (zlib's method:
    shift crc1 by 8 * len2 zero bits, modulo the polynomial, then add crc2)."""
    table = _power_table(algorithm)
    shift, k, n = _TOP, 3, len2  # x^(8 * len2) = product of x^(2^k) over the bits of len2, k+3
    while n:
        if n & 1:
            shift = _multiply(algorithm, table[k & 31], shift)
        n >>= 1
        k += 1
    return _multiply(algorithm, shift, crc1) ^ crc2


def text(crc: int) -> str:
    """How a checksum is written in the metadata: 8 hex digits."""
    return f"{crc:08x}"


def parse(value: object) -> int | None:
    """The checksum written by ``text``, or None when ``value`` is not one."""
    if not isinstance(value, str) or len(value) != 8:
        return None
    try:
        return int(value, 16)
    except ValueError:
        return None
