"""Opening a state dir's database for a command that does not create it (`ls`, `cancel`, ...).

Writable where it can be, else read-only (another user's, a read-only mount), and a state dir
that a `perdure run` is making (empty, or its database without tables yet) is waited for.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from perdure.store.schema import StoreError

WAIT = 2.0  # seconds a reader waits for a state dir being made (run makes it in milliseconds)
POLL = 0.02


def open_existing(path: Path, wait: float = WAIT) -> sqlite3.Connection:
    """A connection to the existing database at `path` with perdure's tables in it;
    StoreError for no database, an empty file or another program's."""
    deadline = time.monotonic() + wait
    while not path.is_file():
        if not _being_made(path.parent) or time.monotonic() >= deadline:
            raise StoreError(f"{path.parent}: no perdure state dir here (no {path.name}); "
                             "check --state-dir or $PERDURE_STATE_DIR")
        time.sleep(POLL)
    db = _connect(path)
    try:
        while not db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='jobs'"
                             ).fetchone():
            if time.monotonic() >= deadline:
                raise StoreError(_no_tables(path))
            time.sleep(POLL)
    except BaseException:
        db.close()
        raise
    return db


def _being_made(state_dir: Path) -> bool:
    try:
        return state_dir.is_dir() and not os.listdir(state_dir)
    except OSError:
        return False


def _connect(path: Path) -> sqlite3.Connection:
    """Writable if it can be, else read-only, else immutable (nothing to share `-shm` with)."""
    first: sqlite3.Error | None = None
    for query in ("mode=rw", "mode=ro", "mode=ro&immutable=1"):
        db = sqlite3.connect(f"file:{path}?{query}", uri=True, timeout=30,
                             isolation_level=None, check_same_thread=False)
        try:  # never a write here (not even WAL mode): the file may be one `run` is making
            db.execute("PRAGMA busy_timeout=30000")
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.Error as exc:
            db.close()
            first = first or exc
            if "unable to open" not in str(exc) and "readonly" not in str(exc):
                raise
    assert first is not None
    raise first


def _no_tables(path: Path) -> str:
    if path.stat().st_size == 0:
        return (f"{path}: empty, with none of perdure's tables; a command that writes (run, "
                "submit, controller, serve) makes them. If none is starting, remove the "
                "empty file")
    return (f"{path}: a SQLite database without perdure's tables (another program's file?); "
            "check --state-dir or $PERDURE_STATE_DIR")
