"""Job state and the event log in sqlite: one transaction per controller tick.

Every process (controller, CLI commands) opens its own connection; WAL lets readers go on
while the controller writes. Commands reach the controller through the `commands` table and are
marked consumed in the same transaction as the tick that applied them.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from perdure.core.events import Command
from perdure.core.model import Job
from perdure.core.records import Event, Node, Strike
from perdure.core.replica import Replica
from perdure.core.spec import JobSpec
from perdure.core.states import ErrorCode, JobState, NodeState
from perdure.secrecy import redact
from perdure.store import rows
from perdure.store.files import create_private, describe_error, make_state_dir
from perdure.store.reader import open_existing
from perdure.store.rows import ReplicaRows
from perdure.store.schema import (
    SCHEMA,
    TERMINAL,
    JobRefError,
    StoredEvent,
    StoreError,
    UnreadableJob,
    into_wal,
)


class Store:
    """The sqlite store of one state dir (`<state_dir>/perdure.db`)."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        """Open (with `create`, create) the database; StoreError naming the path and cause."""
        self.path = path
        self.rows: ReplicaRows
        self._stop_checkpoints = threading.Event()
        try:
            if not create:  # a read-only mount, or a state dir `run` is making, reads too
                self.db = open_existing(path)
                self.rows = ReplicaRows(self.db)
                self.db.execute("SELECT count(*) FROM jobs").fetchone()
                return
            make_state_dir(path.parent)
            create_private(path)
            self.db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=30,
                                      isolation_level=None, check_same_thread=False)
            into_wal(self.db)
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA busy_timeout=30000")
            self.rows = ReplicaRows(self.db)
            with self.transaction():
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        self.db.execute(statement)
                self._add_columns()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(describe_error(path, exc)) from None

    def _add_columns(self) -> None:
        """Columns added since the schema was first written."""
        nodes = {r[1] for r in self.db.execute("PRAGMA table_info(nodes)")}
        if "gpus" not in nodes:
            self.db.execute("ALTER TABLE nodes ADD COLUMN gpus INTEGER NOT NULL DEFAULT 0")
        if "health" not in nodes:
            self.db.execute("ALTER TABLE nodes ADD COLUMN health TEXT NOT NULL DEFAULT ''")

    def close(self) -> None:
        self._stop_checkpoints.set()
        self.db.close()

    def checkpoint_in_background(self, every: float = 1.0) -> None:
        """WAL checkpoints (and their fsync) on a thread, out of the ticks' commits."""
        self.db.execute("PRAGMA wal_autocheckpoint=0")

        def loop() -> None:
            db: sqlite3.Connection | None = None
            try:
                while not self._stop_checkpoints.wait(every):
                    # A machine short of descriptors or disk fails one checkpoint (or the
                    # connection), not the thread: the next one tries again.
                    with contextlib.suppress(sqlite3.Error):
                        db = db or sqlite3.connect(str(self.path), timeout=30)
                        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                if db is not None:
                    db.close()

        threading.Thread(target=loop, name="perdure-wal-checkpoint", daemon=True).start()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """One snapshot for several reads (a job row and its replica rows from one tick)."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN")
        try:
            yield
        finally:
            self.db.execute("COMMIT")

    # ---- jobs --------------------------------------------------------------------------

    def _load(self, job_id: str, data: str, spec: str,
              replicas: list[Replica] | None = None) -> Job:
        """A stored job with its replicas (read now, unless given); UnreadableJob if bad."""
        try:
            d = json.loads(data)
            if replicas is None:
                replicas = self.rows.replicas(job_id, d)
            job = Job.from_json({**d, "replicas": []}, JobSpec.model_validate_json(spec))
            job.replicas = replicas
        except (ValueError, KeyError, TypeError) as exc:
            first = str(exc).splitlines()[0][:300]
            raise UnreadableJob(job_id, f"{type(exc).__name__}: {first}") from None
        self.rows.loaded(job, d)
        return job

    def job_doc(self, job_id: str, data: str) -> dict[str, Any]:
        """A job row's data with its replicas, as JSON (no Job); ValueError if unreadable."""
        d = json.loads(data)
        d["replicas"] = self.rows.docs(job_id, d)
        return dict(d)

    def _put_job(self, job: Job, *, new: bool = False) -> rows.Written:
        """Write the job row and its changed replica rows; for `rows.remember` after commit."""
        data = redact(self.rows.job_text(job))  # its error: never a URL's credentials
        if new:
            spec = job.spec.model_dump_json()
            try:  # a spec that would not read back (JSON writes an infinity as null) stays out
                JobSpec.model_validate_json(spec)
            except ValueError as exc:
                first = " ".join(str(exc).splitlines()[:3])[:300]
                raise StoreError(f"job {job.id} was not stored: its spec would not read back "
                                 f"({first}); this is a bug of perdure's validation") from None
            self.db.execute(
                "INSERT INTO jobs(id, name, queue, priority, state, attempt, created, updated,"
                " spec, data) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (job.id, job.name, job.spec.queue, job.priority, job.state.value, job.attempt,
                 job.created, job.updated, spec, data),
            )
            self.rows.forget(job.id)  # a new job: every row is written
        else:
            self.db.execute(
                "UPDATE jobs SET state=?, attempt=?, updated=?, data=? WHERE id=?",
                (job.state.value, job.attempt, job.updated, data, job.id),
            )
        return self.rows.write(job)

    def submit(self, job: Job) -> None:
        """Store a new job and tell the controller (one transaction)."""
        with self.transaction():
            written = self._put_job(job, new=True)
            self._command("submit", job.id, False, job.created)
        self.rows.remember(job, written)

    def job(self, job_id: str) -> Job | None:
        """The job, None if there is none; UnreadableJob if it cannot be read back."""
        with self._reading():
            row = self.db.execute("SELECT data, spec FROM jobs WHERE id=?",
                                  (job_id,)).fetchone()
            return self._load(job_id, row[0], row[1]) if row else None

    def job_in_parts(self, job_id: str, rows: int) -> Generator[None, None, Job | None]:
        """`job`, its replicas read `rows` rows a step (the controller steps it once a tick)."""
        row = self.db.execute("SELECT data, spec FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            return None
        try:
            count = ReplicaRows.in_parts(json.loads(row[0]))
        except (ValueError, TypeError, AttributeError):
            count = None  # `_load` says what is wrong with it
        if count is None:
            return self._load(job_id, row[0], row[1])
        replicas: list[Replica] = []
        while len(replicas) < count:
            try:
                replicas += self.rows.part(job_id, count, len(replicas),
                                              min(count, len(replicas) + rows))
            except ValueError as exc:
                raise UnreadableJob(job_id, f"ValueError: {exc}") from None
            if len(replicas) < count:
                yield
        return self._load(job_id, row[0], row[1], replicas)

    def unfinished(self) -> tuple[list[Job], list[UnreadableJob]]:
        good: list[Job] = []
        bad: list[UnreadableJob] = []
        with self._reading():
            rows = self.db.execute(
                f"SELECT id, data, spec FROM jobs WHERE state NOT IN {TERMINAL} ORDER BY created"
            ).fetchall()
            for r in rows:
                try:
                    good.append(self._load(r[0], r[1], r[2]))
                except UnreadableJob as exc:
                    bad.append(exc)
        return good, bad

    def fail_unreadable(self, err: UnreadableJob, now: float) -> list[str]:
        """Fail a job that cannot be read back, on its own; return the launch ids of its
        replicas that may still run (the controller stops them)."""
        row = self.db.execute("SELECT data FROM jobs WHERE id=?", (err.job_id,)).fetchone()
        try:
            data = json.loads(row[0]) if row else {}
            replicas = self.rows.docs(err.job_id, data) if isinstance(data, dict) else []
            running = [r["launch_id"] for r in replicas
                       if r.get("launch_id") and r.get("state") in ("STARTING", "RUNNING",
                                                                     "STOPPING")]
        except (ValueError, TypeError, AttributeError):
            data, running = {}, []
        message = redact(f"{err}; the job was failed (the other jobs go on)")
        data = {**(data if isinstance(data, dict) else {}), "state": JobState.FAILED.value,
                "after_stop": None,
                "error": {"code": ErrorCode.INTERNAL.value, "message": message}}
        with self.transaction():
            self.db.execute("UPDATE jobs SET state=?, updated=?, data=? WHERE id=?",
                            (JobState.FAILED.value, now, json.dumps(data), err.job_id))
            self.db.execute("INSERT INTO events(time, job_id, kind, message) VALUES (?,?,?,?)",
                            (now, err.job_id, "state", f"FAILED: INTERNAL: {message}"))
        return [str(x) for x in running]

    def job_rows(self) -> list[dict[str, Any]]:
        cur = self.db.execute(
            "SELECT id, name, queue, priority, state, attempt, created, updated FROM jobs"
            " ORDER BY created"
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def resolve(self, ref: str) -> str | None:
        """A job id from an id, a name (the newest job of that name) or an id prefix that
        names one job; None if nothing matches. JobRefError for an empty or ambiguous ref."""
        if not ref.strip():
            raise JobRefError("an empty job reference: give a job id, a prefix of one, or a name")
        row = self.db.execute(
            "SELECT id FROM jobs WHERE id=? OR name=? ORDER BY id=? DESC, created DESC LIMIT 1",
            (ref, ref, ref),
        ).fetchone()
        if row:
            return str(row[0])
        rows = self.db.execute(  # a literal prefix: no LIKE wildcards to escape
            "SELECT id FROM jobs WHERE substr(id, 1, ?) = ? ORDER BY created DESC LIMIT 11",
            (len(ref), ref),
        ).fetchall()
        if len(rows) > 1:
            shown = ", ".join(str(r[0]) for r in rows[:10]) + (", ..." if len(rows) > 10 else "")
            raise JobRefError(f"{ref!r} is the start of several job ids ({shown}); give more "
                              "of the id", [str(r[0]) for r in rows[:10]])
        return str(rows[0][0]) if rows else None

    # ---- commands ----------------------------------------------------------------------

    def _command(self, kind: str, target: str, hold: bool, at: float) -> None:
        self.db.execute(
            "INSERT INTO commands(time, kind, target, hold) VALUES (?,?,?,?)",
            (at, kind, target, int(hold)),
        )

    def command(self, kind: str, target: str, hold: bool = False) -> None:
        with self.transaction():
            self._command(kind, target, hold, time.time())

    def commands_after(self, last_id: int, limit: int = 1000) -> list[tuple[int, Command]]:
        rows = self.db.execute(
            "SELECT id, time, kind, target, hold FROM commands WHERE id > ? ORDER BY id LIMIT ?",
            (last_id, limit),
        ).fetchall()
        return [(r[0], Command(kind=r[2], target=r[3], time=r[1], hold=bool(r[4]))) for r in rows]

    def last_command_id(self) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key='last_command'").fetchone()
        return int(row[0]) if row else 0

    # ---- nodes -------------------------------------------------------------------------

    def nodes(self) -> dict[str, Node]:
        try:
            rows = self.db.execute("SELECT name, slots, state, gpus, health FROM nodes").fetchall()
        except sqlite3.OperationalError:  # read-only, made before GPUs or health: none kept
            rows = [(*r, 0, "") for r in self.db.execute("SELECT name, slots, state FROM nodes")]
        return {r[0]: _node(*r) for r in rows}

    def save_nodes(self, nodes: Iterable[Node]) -> None:
        with self.transaction():
            self._put_nodes(nodes)

    def _put_nodes(self, nodes: Iterable[Node]) -> None:
        self.db.execute("DELETE FROM nodes")
        self.db.executemany(
            "INSERT INTO nodes(name, slots, state, gpus, health) VALUES (?,?,?,?,?)",
            [(n.name, n.slots, n.state.value, n.gpus,
              json.dumps(n.health_json()) if n.fence or n.strikes else "") for n in nodes],
        )

    # ---- ticks and events --------------------------------------------------------------

    def commit_tick(
        self,
        jobs: Iterable[Job],
        events: Iterable[Event],
        nodes: Iterable[Node] | None,
        last_command: int | None,
    ) -> list[StoredEvent]:
        """Write a tick's job changes, events, node states and consumed commands at once."""
        stored: list[StoredEvent] = []
        written: list[tuple[Job, rows.Written]] = []
        with self.transaction():
            for job in jobs:
                written.append((job, self._put_job(job)))
            for e in events:
                message = redact(e.message)  # stored and published without credentials
                cur = self.db.execute(
                    "INSERT INTO events(time, job_id, kind, message) VALUES (?,?,?,?)",
                    (e.time, e.job_id, e.kind, message),
                )
                stored.append(StoredEvent(int(cur.lastrowid or 0), e.time, e.job_id, e.kind,
                                          message))
            if nodes is not None:
                self._put_nodes(nodes)
            if last_command is not None:
                self.db.execute(
                    "INSERT INTO meta(key, value) VALUES ('last_command', ?)"
                    " ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                    (str(last_command),),
                )
        for job, values in written:
            self.rows.remember(job, values)
        return stored

    def events(self, job_id: str | None = None, after: int = 0) -> list[StoredEvent]:
        of_job = "job_id=? AND " if job_id is not None else ""
        args = (job_id, after) if job_id is not None else (after,)
        rows = self.db.execute("SELECT id, time, job_id, kind, message FROM events WHERE "
                               f"{of_job}id > ? ORDER BY id", args).fetchall()
        # redacted again when read: a row an older perdure stored may hold credentials
        return [StoredEvent(i, t, j, k, redact(m)) for i, t, j, k, m in rows]


def _node(name: str, slots: int, state: str, gpus: int, health: str) -> Node:
    """A node row: its quarantine and strikes in `health` (JSON; empty: none)."""
    kept = json.loads(health) if health else {}
    return Node(name, slots, NodeState(state), gpus, fence=kept.get("fence", ""),
                strikes=tuple(Strike.from_json(s) for s in kept.get("strikes", ())))
