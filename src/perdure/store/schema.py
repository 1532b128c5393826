"""The store's tables, the errors it raises, and putting a new database into WAL mode."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from perdure.store import rows

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, queue TEXT NOT NULL, priority INTEGER NOT NULL,
    state TEXT NOT NULL, attempt INTEGER NOT NULL, created REAL NOT NULL, updated REAL NOT NULL,
    spec TEXT NOT NULL, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, job_id TEXT,
    kind TEXT NOT NULL, message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id, id);
CREATE TABLE IF NOT EXISTS nodes (
    name TEXT PRIMARY KEY, slots INTEGER NOT NULL, state TEXT NOT NULL,
    gpus INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS commands (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, kind TEXT NOT NULL,
    target TEXT NOT NULL, hold INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
""" + rows.SCHEMA

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


class StoreError(RuntimeError):
    """The state dir's database cannot be used; the message names the path and the cause."""


class UnreadableJob(ValueError):
    """A stored job that cannot be read back (written by a bug or another version)."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"stored job {job_id} cannot be read back: {reason}")
        self.job_id, self.reason = job_id, reason


class JobRefError(LookupError):
    """A job reference that is empty or names more than one job; the message lists them."""

    def __init__(self, message: str, candidates: list[str] | None = None) -> None:
        super().__init__(message)
        self.candidates = candidates or []  # the job ids an ambiguous reference may mean


@dataclass(frozen=True)
class StoredEvent:
    id: int
    time: float
    job_id: str | None
    kind: str
    message: str


def into_wal(db: sqlite3.Connection, limit: float = 30.0) -> None:
    """Put the database in WAL mode, retrying "database is locked" (sqlite's busy handler
    does not cover it: two processes opening a new state dir at once)."""
    deadline = time.monotonic() + limit
    delay = 0.005
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
