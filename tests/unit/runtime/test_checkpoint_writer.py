"""Shard writing: small payloads written whole give the same file and checksums as streaming."""

from __future__ import annotations

import io
import pickle
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


def _tensors() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [
        torch.randn(64, 38, generator=g),
        torch.tensor(3.5),  # 0-dim
        torch.zeros(0),  # no bytes at all
        torch.randint(0, 2, (5,), dtype=torch.bool, generator=g),
        torch.randn(3, 4, dtype=torch.complex64, generator=g),
        torch.randn(3, 4, generator=g).to(torch.bfloat16),
        torch.arange(9, dtype=torch.int64).reshape(3, 3),
        torch.randn(writer.SMALL // 4 + 1, generator=g),  # streamed
    ]


def test_skeleton_writes_are_the_bytes_torch_save_writes(tmp_path: Path) -> None:
    payloads: list[torch.Tensor | bytes] = [*_tensors(), b"a plain value"]
    plain = writer.write_payloads(tmp_path / "plain", payloads, fsync=False,
                                  algorithm=checksum.ALGORITHM)
    skeletons = writer.Skeletons()
    for n in range(3):  # the first write learns each layout, the next ones use it
        for t in payloads[:-1]:
            assert isinstance(t, torch.Tensor)
            if t.dtype != torch.bool:
                t.add_(1)  # new values, same layout
        plain = writer.write_payloads(tmp_path / f"plain{n}", payloads, fsync=False,
                                      algorithm=checksum.ALGORITHM)
        fast = writer.write_payloads(tmp_path / f"fast{n}", payloads, fsync=False,
                                     algorithm=checksum.ALGORITHM, skeletons=skeletons)
        assert fast == plain
        assert (tmp_path / f"fast{n}").read_bytes() == (tmp_path / f"plain{n}").read_bytes()
    alignment = torch.serialization._get_storage_alignment()
    made = [skeletons.get(t, alignment) is not None for t in payloads[:-1]
            if isinstance(t, torch.Tensor)]
    assert made == [True] * (len(made) - 1) + [False]  # the large one streams through torch


@pytest.mark.parametrize("later", [torch.zeros(6, 4), torch.zeros(24), torch.zeros(4, 6).T,
                                   torch.zeros(4, 6, dtype=torch.int32),
                                   torch.zeros(4, 6, requires_grad=True),
                                   torch.zeros(8, 6)[2:6]])
def test_a_new_layout_never_reuses_a_stale_skeleton(tmp_path: Path, later: torch.Tensor) -> None:
    """Same byte count, another shape / stride / dtype / autograd flag / storage: the archive
    of the first must not be reused for the second."""
    skeletons = writer.Skeletons()
    writer.write_payloads(tmp_path / "first", [torch.ones(4, 6)], fsync=False,
                          algorithm=checksum.ALGORITHM, skeletons=skeletons)
    fast = writer.write_payloads(tmp_path / "fast", [later], fsync=False,
                                 algorithm=checksum.ALGORITHM, skeletons=skeletons)
    plain = writer.write_payloads(tmp_path / "plain", [later], fsync=False,
                                  algorithm=checksum.ALGORITHM)
    assert fast == plain and (tmp_path / "fast").read_bytes() == (tmp_path / "plain").read_bytes()
    back = torch.load(tmp_path / "fast", weights_only=True)
    assert back.shape == later.shape and back.dtype == later.dtype


def test_an_archive_that_depends_on_the_bytes_gets_no_skeleton(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch.save with its zip CRC-32 writes checksums of the data outside the data: the probe
    must catch that and keep such a layout on torch.save."""
    from perdure.runtime.checkpoint import template

    monkeypatch.setattr(template, "save_tensor", lambda t, stream: torch.save(t, stream))
    assert template.build(torch.randn(16, 8)) is None
    monkeypatch.undo()
    assert template.build(torch.randn(16, 8)) is not None


def _values() -> list[object]:
    return [*range(-3, 300, 7), 2**40 + 1, 2**40 + 5, 0.5, -0.0, 3e-3, 1e-4, True, False, None,
            (0.9, 0.999), (0.8, 0.99), [1, 2], [3, 4], "adamw", "sgd_m", torch.Size([2, 3]),
            torch.Size([4, 5]), torch.float32, torch.int64]


def test_value_archives_are_the_bytes_torch_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    from perdure.runtime.checkpoint import template

    archives = template.ValueArchives()
    asked = []
    real = template._saved
    monkeypatch.setattr(template, "_saved", lambda v: asked.append(v) or real(v))
    for round_ in range(2):
        for value in _values():
            data = archives.archive(value)
            assert data == real(value), value
            back = torch.load(io.BytesIO(data), weights_only=True)
            assert back == value and type(back) is type(value)
        if round_ == 0:
            asked.clear()
    # the second round: each kind of archive is made up once two values of it were seen
    kinds = [(type(v), len(pickle.dumps(v, protocol=2))) for v in _values()]
    alone = [v for v, kind in zip(_values(), kinds, strict=True) if kinds.count(kind) == 1]
    assert asked == alone and len(alone) < 6


def test_a_value_archive_that_depends_on_the_value_is_always_torchs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An archive with a checksum of its pickle outside the pickle is never made up."""
    import zlib

    from perdure.runtime.checkpoint import template

    real = template._saved
    monkeypatch.setattr(template, "_saved",
                        lambda v: real(v) + zlib.crc32(repr(v).encode()).to_bytes(4, "little"))
    archives = template.ValueArchives()
    for value in [5, 6, 7, 8, 9]:
        assert archives.archive(value) == template._saved(value)


def test_a_buffer_changed_in_place_is_written_as_it_is_now(tmp_path: Path) -> None:
    skeletons = writer.Skeletons()
    buffer = torch.arange(16, dtype=torch.float32)
    for change in (lambda t: t.resize_(2, 8), lambda t: t.set_(torch.arange(5.0)),
                   lambda t: t.as_strided_((5,), (1,)), lambda t: t.fill_(7)):
        change(buffer)
        writer.write_payloads(tmp_path / "f", [buffer], fsync=False, algorithm=checksum.CRC32,
                              skeletons=skeletons)
        back = torch.load(tmp_path / "f", weights_only=True)
        assert torch.equal(back, buffer) and back.shape == buffer.shape


def test_a_value_archive_follows_torchs_alignment_setting() -> None:
    from torch.utils.serialization import config

    from perdure.runtime.checkpoint import template

    archives = template.ValueArchives()
    for value in (1, 2, 3):
        archives.archive(value)  # learnt and proven at the default alignment
    with config.patch({"save.storage_alignment": 4096}):
        for value in (4, 5, 6):
            data = archives.archive(value)
            assert data == template._saved(value) and b"4096" in data
    assert torch.serialization._get_storage_alignment() == 64
