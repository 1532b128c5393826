"""The state dir's files: made private to their owner, and sqlite's errors said in words."""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

from perdure import statedir


def make_state_dir(path: Path) -> None:
    """Create a state dir readable by its owner only (specs' env, the API token and
    checkpoints may hold secrets); every command that writes into one calls this first.

    An open one of this user's with a perdure database in it is closed; a directory without
    one is left as it is (`--state-dir .` is someone's project).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.stat()
    if info.st_mode & 0o077 and info.st_uid == os.getuid() and (path / statedir.DB).exists():
        os.chmod(path, 0o700)


def create_private(path: Path) -> None:
    """Create the database file owner-only, if it is not there yet.

    Never opens an existing one: closing any descriptor of a file drops every POSIX lock this
    process holds on it, its sqlite connections' included ("disk I/O error" after).
    """
    if path.exists():
        return
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))


def describe_error(path: Path, exc: BaseException) -> str:
    """`<path>: <cause>`, with what to check for the causes sqlite names tersely."""
    text = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(
        exc).__name__
    hints = {
        "unable to open database file": "missing, or not readable and writable by this user",
        "readonly database": "read-only: perdure needs to write it",
        "disk I/O error": "the disk failed or is full",
        "database or disk is full": "the disk is full",
        "file is not a database": "not a perdure database (corrupt, or another file)",
        "database disk image is malformed": "the database is corrupt",
    }
    hint = next((h for k, h in hints.items() if k in text), "")
    return f"{path}: {text}" + (f" ({hint})" if hint else "")
