"""A replica's log under its cap: the tail stays, the head goes, the writer goes on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perdure.backends.node import logcap


def test_a_log_over_its_cap_keeps_its_newest_half(tmp_path: Path) -> None:
    path = tmp_path / "w.out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # as the replica has it
    lines = [f"line {i:06d}\n".encode() for i in range(20_000)]  # 240 000 bytes
    os.write(fd, b"".join(lines))
    limit = 100_000
    shift, mark = logcap.trim(str(path), limit)
    data = path.read_bytes()
    assert len(data) <= limit // 2 + mark
    assert data.startswith(b"=== perdure: ") and b"earlier bytes of this log were dropped" in data
    kept = data[mark:].split(b"\n")
    assert kept[-2] == b"line 019999" and kept[0].startswith(b"line ")  # whole lines only
    before = b"".join(lines).index(kept[0] + b"\n")
    assert before - shift == mark  # where a byte moved to
    os.write(fd, b"after\n")  # the replica's descriptor writes at the new end
    os.close(fd)
    assert path.read_bytes().endswith(b"line 019999\nafter\n")
    assert logcap.trim(str(path), limit) == (0, 0)  # under the cap: untouched


def test_a_missing_file_is_no_error(tmp_path: Path) -> None:
    assert logcap.trim(str(tmp_path / "gone"), 10) == (0, 0)


def test_the_cap_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(logcap.ENV, raising=False)
    assert logcap.max_bytes() == 64 << 20
    assert logcap.max_bytes("1") == 1 << 20
    for bad in ("0", "-1", "lots", str(logcap.MAX_MB + 1)):
        with pytest.raises(ValueError, match=rf"{bad!r} \(\$PERDURE_LOG_MAX_MB\) .* from 1 to"):
            logcap.max_bytes(bad)
