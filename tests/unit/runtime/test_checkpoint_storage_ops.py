"""Storage operations outside the commit path: fsspec rename."""

from __future__ import annotations

import uuid

from perdure.runtime.checkpoint.storage import FsspecStorage


def test_fsspec_rename_moves_a_whole_directory() -> None:
    storage = FsspecStorage(f"memory://ops-{uuid.uuid4().hex}")
    storage.makedirs("a")
    storage.write_bytes("a/x", b"1")
    storage.write_bytes("a/y", b"22")
    storage.rename("a", "b")
    assert storage.list_names() == ["b"]
    assert (storage.read_bytes("b/x"), storage.size("b/y")) == (b"1", 2)
    assert storage.size("a/x") is None
    assert not storage.atomic_rename  # the commit protocol never relies on it here
