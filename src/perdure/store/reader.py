"""Opening a state dir's database for a command that does not create it (`ls`, `describe`,
`logs`, `cancel`, ...): writable where it can be, read-only where the state dir is not this
user's to write, and never an error for a state dir that a `perdure run` is making right now.

- Writable first (commands like `cancel` write a command row). A state dir on a read-only
  mount, or another user's, opens read-only instead (`mode=ro`; with no `-shm` file there to
  share and none that can be made, `immutable=1`: what is on disk, nobody writing).
- A state dir being made: its directory exists but is still empty, or its `perdure.db` has
  no tables yet (`run` creates the file, then its tables in one transaction). Wait up to
  `wait` seconds for the tables, then say in one line what the file is.

Side effects: opens the database, sleeps while waiting.
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
    """A connection to the existing database at `path` with perdure's tables in it.

    StoreError (one line) for no database, an empty file or a database of another program;
    sqlite3.Error or OSError for what sqlite says (the caller words them)."""
    deadline = time.monotonic() + wait
    while not path.is_file():
        if not _being_made(path.parent) or time.monotonic() >= deadline:
            raise StoreError(f"{path.parent}: no perdure state dir here (no {path.name}); "
                             "check --state-dir or $PERDURE_STATE_DIR")
        time.sleep(POLL)
    db = _connect(path)
    try:
        while not _has_tables(db):
            if time.monotonic() >= deadline:
                raise StoreError(_no_tables(path))
            time.sleep(POLL)
    except BaseException:
        db.close()
        raise
    return db


def _being_made(state_dir: Path) -> bool:
    """A directory that exists and holds nothing yet (`run` makes it, then perdure.db)."""
    try:
        return state_dir.is_dir() and not os.listdir(state_dir)
    except OSError:
        return False


def _connect(path: Path) -> sqlite3.Connection:
    """Writable if it can be, else read-only, else immutable; the first that can read."""
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


def _has_tables(db: sqlite3.Connection) -> bool:
    row = db.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND "
                     "name='jobs'").fetchone()
    return bool(row[0])


def _no_tables(path: Path) -> str:
    if path.stat().st_size == 0:
        return (f"{path}: empty, with none of perdure's tables; a command that writes (run, "
                "submit, controller, serve) makes them. If none is starting, remove the "
                "empty file")
    return (f"{path}: a SQLite database without perdure's tables (another program's file?); "
            "check --state-dir or $PERDURE_STATE_DIR")
