"""File modes for checkpoints: private wherever their directory is private.

Where only the owner can enter the directory (a perdure state dir, the staging dir), every new
directory is 0700 and every file 0600; anywhere else the umask decides. A file is never created
through a symbolic link planted at its name.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import BinaryIO

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW


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


def make_dirs(path: str | os.PathLike[str]) -> None:
    """`mkdir -p path`, each new directory 0700 where the first existing one is private."""
    mode = 0o700 if is_private(path) else 0o777
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current) and os.path.dirname(current) != current:
        missing.append(current)
        current = os.path.dirname(current)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, mode)


def create(path: str | os.PathLike[str]) -> BinaryIO:
    """Open `path` for writing (never through a symlink there): 0600 in a private directory."""
    mode = 0o600 if is_private(os.path.dirname(os.path.abspath(path))) else 0o666
    return os.fdopen(os.open(path, _CREATE, mode), "wb")


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
