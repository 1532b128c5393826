"""Checkpoint files: private under a private directory, the umask's elsewhere, and never
written through a symlink planted at their name."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from perdure.runtime.checkpoint import modes
from perdure.runtime.checkpoint.storage import LocalStorage


def umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.parametrize(
    ("root_mode", "dirs", "files"), [(0o700, 0o700, 0o600), (0o755, 0o777, 0o666)]
)
def test_made_directories_and_their_files_take_the_roots_privacy(
    tmp_path: Path, root_mode: int, dirs: int, files: int
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(root_mode)
    storage = LocalStorage(root / "ckpt")
    storage.makedirs("a/b")  # two levels made: the mode the files take is remembered
    storage.write_bytes("a/b/f", b"x")
    storage.write_bytes("a/g", b"y")  # not the directory made last: asked
    for d in (root / "ckpt", root / "ckpt/a", root / "ckpt/a/b"):
        assert mode(d) == dirs & ~umask()
    assert mode(root / "ckpt/a/b/f") == mode(root / "ckpt/a/g") == files & ~umask()


def test_a_directory_that_was_there_is_asked_not_assumed(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "open").mkdir()
    (private / "open").chmod(0o755)  # opened by its owner: files follow the umask there
    modes.make_dirs(private / "open")
    with modes.create(private / "open" / "f") as f:
        f.write(b"x")
    assert mode(private / "open" / "f") == 0o666 & ~umask()


def test_a_symlink_planted_at_a_files_name_is_refused(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "ckpt")
    storage.makedirs("step")
    target = tmp_path / "elsewhere"
    target.write_bytes(b"theirs")
    (tmp_path / "ckpt" / "step" / "COMMITTED").symlink_to(target)
    with pytest.raises(OSError):
        storage.write_bytes("step/COMMITTED", b"mine")
    assert target.read_bytes() == b"theirs"


def test_the_writer_counts_what_it_wrote(tmp_path: Path) -> None:
    with modes.create(tmp_path / "f") as f:
        f.write(b"a" * 10)
        assert f.tell() == 10
        f.write(memoryview(b"b" * 100_000))
        assert f.tell() == 100_010
    assert (tmp_path / "f").read_bytes() == b"a" * 10 + b"b" * 100_000
