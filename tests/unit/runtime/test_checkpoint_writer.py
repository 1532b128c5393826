"""Shard writing: small payloads written whole give the same file and checksums as streaming."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from perdure.runtime.checkpoint import checksum, writer


def _payloads() -> list[torch.Tensor | bytes]:
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(16, 8, generator=g),  # small: serialised in memory
        b"a serialised plain value",
        torch.randn(writer.SMALL // 4 + 1, generator=g),  # just over the limit: streamed
        torch.arange(7, dtype=torch.int64),
        bytes(range(256)) * (writer.SMALL // 256 + 1),  # large bytes: streamed
    ]


@pytest.mark.parametrize("algorithm", [a for a in (checksum.CRC32C, checksum.CRC32)
                                       if checksum.supported(a)])
def test_small_payloads_written_whole_match_the_streamed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algorithm: str
) -> None:
    payloads = _payloads()
    whole = writer.write_payloads(tmp_path / "whole", payloads, fsync=False,
                                  algorithm=algorithm)
    monkeypatch.setattr(writer, "SMALL", -1)  # everything streams, as before
    streamed = writer.write_payloads(tmp_path / "streamed", payloads, fsync=False,
                                     algorithm=algorithm)
    data = (tmp_path / "whole").read_bytes()
    assert data == (tmp_path / "streamed").read_bytes() and whole == streamed
    assert whole.size == len(data) and whole.crc == checksum.update(algorithm, 0, data)
    for payload, (start, length, crc) in zip(payloads, whole.spans, strict=True):
        chunk = data[start:start + length]
        assert crc == checksum.update(algorithm, 0, chunk)
        if isinstance(payload, torch.Tensor):  # stock torch.load reads each item
            assert torch.equal(torch.load(io.BytesIO(chunk), weights_only=True), payload)
        else:
            assert chunk == payload
