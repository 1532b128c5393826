"""Shard writing: every payload's span and checksum, and the whole file's, match its bytes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from perdure.runtime.checkpoint import checksum, writer


def _payloads() -> list[torch.Tensor | bytes]:
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(16, 8, generator=g),
        b"a serialised plain value",
        torch.randn((5 << 20) // 4, generator=g),  # more than one hashed slice
        torch.arange(7, dtype=torch.int64),
        bytes(range(256)) * 4097,
    ]


@pytest.mark.parametrize("algorithm", [a for a in (checksum.CRC32C, checksum.CRC32)
                                       if checksum.supported(a)])
def test_spans_and_checksums_match_the_written_file(tmp_path: Path, algorithm: str) -> None:
    payloads = _payloads()
    written = writer.write_payloads(tmp_path / "shard", payloads, fsync=False,
                                    algorithm=algorithm)
    data = (tmp_path / "shard").read_bytes()
    assert written.size == len(data) and written.crc == checksum.update(algorithm, 0, data)
    for payload, (start, length, crc) in zip(payloads, written.spans, strict=True):
        chunk = data[start:start + length]
        assert crc == checksum.update(algorithm, 0, chunk)
        if isinstance(payload, torch.Tensor):  # stock torch.load reads each item
            assert torch.equal(torch.load(io.BytesIO(chunk), weights_only=True), payload)
        else:
            assert chunk == payload
