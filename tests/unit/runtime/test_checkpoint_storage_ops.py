"""Storage operations outside the commit path: fsspec rename, the read-only restore reader."""

from __future__ import annotations

import uuid

import pytest

from perdure.runtime.checkpoint.reader import _StorageFS
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


def test_the_restore_reader_refuses_every_write_naming_it() -> None:
    storage = FsspecStorage(f"memory://ops-{uuid.uuid4().hex}")
    storage.write_bytes("c/f", b"data")
    fs = _StorageFS(storage)
    with fs.create_stream("c/f", "rb") as stream:
        assert stream.read() == b"data"
    only = r"only reads checkpoints; asked to open c/f with mode 'wb'"
    with pytest.raises(ValueError, match=only), fs.create_stream("c/f", "wb"):
        pass
    with pytest.raises(ValueError, match="rename c/f to c/g"):
        fs.rename("c/f", "c/g")
    with pytest.raises(ValueError, match="create the directory c/d"):
        fs.mkdir("c/d")
    with pytest.raises(ValueError, match="delete c/f"):
        fs.rm_file("c/f")
    assert storage.read_bytes("c/f") == b"data"  # nothing was touched
