"""Locating a tensor's bytes inside a torch.save archive, and reading them straight into it."""

from __future__ import annotations

import io

import pytest
import torch

from perdure.runtime.checkpoint import checksum
from perdure.runtime.checkpoint.fastread import payload_span, read_checked


@pytest.mark.parametrize(
    "tensor",
    [
        torch.arange(12, dtype=torch.float32).reshape(3, 4),
        torch.tensor(3.5),
        torch.arange(10, dtype=torch.int64),
        torch.randn(5, 7).to(torch.bfloat16),
        torch.zeros(0, 4),
    ],
)
def test_payload_span_finds_the_bytes_of_a_saved_tensor(tensor: torch.Tensor) -> None:
    archive = io.BytesIO()
    archive.write(b"x" * 100)  # the item does not start the file
    torch.save(tensor, archive)
    length = archive.tell() - 100
    span = payload_span(archive, 100, length)
    assert span is not None
    assert span[1] == tensor.numel() * tensor.element_size()
    target = torch.empty_like(tensor)
    crc = read_checked(archive, 100, length, span, target, checksum.CRC32C)
    assert crc == checksum.update(checksum.CRC32C, 0, archive.getvalue()[100:])
    assert torch.equal(target, tensor)


def test_payload_span_refuses_what_is_not_a_single_stored_tensor() -> None:
    archive = io.BytesIO()
    torch.save({"a": torch.ones(2), "b": torch.zeros(2)}, archive)  # two storages
    assert payload_span(archive, 0, archive.tell()) is None
    assert payload_span(io.BytesIO(b"not a zip at all"), 0, 16) is None
