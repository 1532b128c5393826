"""File modes for checkpoints: private wherever their directory is private.

A checkpoint written where only its owner can enter (a perdure state dir is 0700; so is the
staging dir) stays that way: every directory it makes is 0700 and every file 0600, so a
checkpoint copied or moved out, or a state dir opened up later, does not hand the weights to
other users. Anywhere else the umask decides, as for any file the user writes (a team's
shared checkpoint directory stays shared). A file is never created through a symbolic link
planted at its name (the open fails), so its bytes go nowhere but where the checkpoint is.

Each system call of a background save hands the GIL over and back beside a training thread,
so these make few: a file is written through plain ``os.write`` calls (``open()`` adds an
fstat, a terminal check and a seek per ``tell`` that a checkpoint file never needs), and the
directory a save has just made is not asked again, file by file, whether it is private.

Side effects: creates directories and files.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
_PRIVATE_FILE, _FILE = 0o600, 0o666  # what a file is created with (the umask takes its part)
# The directory make_dirs made (or found) last and the mode a file made in it is created with:
# a save makes its directory, then writes its files there. One slot: nothing to grow or expire.
_last: tuple[str, int] = ("", _FILE)


def is_private(path: str | os.PathLike[str]) -> bool:
    """Whether the nearest existing directory at or above `path` is closed to others."""
    current = os.path.abspath(path)
    while True:
        try:
            return os.stat(current).st_mode & 0o077 == 0
        except FileNotFoundError:
            parent = os.path.dirname(current)
            if parent == current:
                return False
            current = parent


def _directory(path: str) -> os.stat_result | None:
    with contextlib.suppress(OSError):
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            return info
    return None


def make_dirs(path: str | os.PathLike[str]) -> None:
    """`mkdir -p path`, each new directory 0700 where the first existing one is private."""
    global _last
    path = os.path.abspath(path)
    missing = [path]  # made, or found there when mkdir says it exists
    above = os.path.dirname(path)
    while (info := _directory(above)) is None and os.path.dirname(above) != above:
        missing.append(above)
        above = os.path.dirname(above)
    private = info is not None and info.st_mode & 0o077 == 0
    # A directory made here is 0700, or 0777 less the umask, which takes the same bits from
    # its files' 0666: they take the mode of its parent's privacy. One that was there is asked.
    mode = _PRIVATE_FILE if private else _FILE
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700 if private else 0o777)
        except FileExistsError:
            if directory == path:
                mode = _file_mode(path)
    _last = (path, mode)


def create(path: str | os.PathLike[str]) -> BinaryIO:
    """Open `path` for writing (created or truncated, never through a symlink at `path`):
    0600 in a private directory."""
    where = os.path.dirname(os.path.abspath(path))
    known, mode = _last
    fd = os.open(path, _CREATE, mode if where == known else _file_mode(where))
    return io.BufferedWriter(_Output(fd))


def _file_mode(directory: str) -> int:
    return _PRIVATE_FILE if is_private(directory) else _FILE


class _Output(io.RawIOBase):
    """A file written with plain system calls; it counts its own position (what ``tell``
    answers), as it is only ever written from the start, in order."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd, self._at = fd, 0

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer) -> int:
        written = os.write(self._fd, data)
        self._at += written
        return written

    def tell(self) -> int:
        return self._at

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


def private_dir(path: Path, what: str) -> Path:
    """`path` as a directory of this user's that only they can enter (made 0700, or made so
    when it is theirs); PermissionError naming `what` when another user owns it."""
    make_dirs(path.parent)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if info.st_uid != os.getuid() or not os.path.isdir(path) or os.path.islink(path):
        raise PermissionError(f"{what} {path} is not a directory of this user's: another "
                              "user made it; set PERDURE_STAGING_DIR to a directory of yours")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path
