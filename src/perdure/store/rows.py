"""A job's replicas as rows of their own: a tick writes the replicas it changed, not the job.

The job row keeps the job's fields, the replica rows' count and their values' names; a row is
a replica's values. A tick changes a replica only on its own copy (`Job.own`), so a replica
that is the very object this connection last wrote or read is unchanged.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import operator
import sqlite3
from collections.abc import Sequence
from typing import Any

from perdure.core.model import Job
from perdure.core.replica import Replica
from perdure.core.states import ReplicaState

SCHEMA = """
CREATE TABLE IF NOT EXISTS replicas (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (job_id, idx)
) WITHOUT ROWID
"""

COUNT_KEY = "replica_rows"  # in a job row's data: its replicas are rows (else: in the data)
FIELDS_KEY = "replica_fields"  # the names of a replica row's values, in order

Written = tuple[Replica, ...]  # what `write` wrote, for `remember`


_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_FIELDS = tuple(f.name for f in dataclasses.fields(Replica))  # a replica's __dict__ order
_STATES = {s.value: s for s in ReplicaState}


class ReplicaRows:
    """The replica rows of one connection, and what it knows they hold."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        # job id -> the replicas as last written or read (objects a tick never changes)
        self._known: dict[str, Written] = {}
        self._members: dict[str, tuple[tuple[str, ...], str]] = {}  # job id -> members, JSON

    def job_text(self, job: Job) -> str:
        """The job row's data: the job without its replicas, their rows' count and fields; an
        elastic job's members (one tuple a round, shared by its later copies) encoded once."""
        fields = list(job.replicas[0].__dict__) if job.replicas else []
        d = {**job.to_json(replicas=False), COUNT_KEY: len(job.replicas), FIELDS_KEY: fields}
        del d["members"]
        kept = self._members.get(job.id)
        if kept is None or kept[0] is not job.members:
            kept = (job.members, json.dumps(list(job.members)))
            if isinstance(job.members, tuple):  # never changed in place: safe to keep
                self._members[job.id] = kept
        return f'{json.dumps(d)[:-1]}, "members": {kept[1]}}}'

    def write(self, job: Job) -> Written:
        """Write the replicas of `job` that are not those last stored; for `remember`."""
        now = tuple(job.replicas)
        known = self._known.get(job.id)
        if known is None or len(known) != len(now):
            changed: Sequence[int] = range(len(now))
            self.db.execute("DELETE FROM replicas WHERE job_id=? AND idx>=?",
                            (job.id, len(now)))
        else:
            # identity per replica, compared in C rather than in a Python loop
            changed = list(itertools.compress(range(len(now)), map(operator.is_not, now, known)))
        if changed:
            self.db.executemany(
                "INSERT OR REPLACE INTO replicas(job_id, idx, data) VALUES (?,?,?)",
                [(job.id, i, _ENCODE(tuple(now[i].__dict__.values()))) for i in changed])
        return now

    def remember(self, job: Job, values: Written) -> None:
        """The tick that wrote `values` committed (a finished job is never written again)."""
        if job.state.terminal:
            self.forget(job.id)
        else:
            self._known[job.id] = values

    def forget(self, job_id: str) -> None:
        self._known.pop(job_id, None)
        self._members.pop(job_id, None)

    def docs(self, job_id: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        """A stored job's replicas as JSON, in rank order (from rows, or from a job row
        stored before rows); ValueError if rows are missing."""
        if COUNT_KEY not in data:
            return list(data.get("replicas", []))
        count, fields = int(data[COUNT_KEY]), list(data[FIELDS_KEY])
        rows = self.db.execute(
            "SELECT data FROM replicas WHERE job_id=? AND idx<? ORDER BY idx",
            (job_id, count)).fetchall()
        if len(rows) != count:
            raise ValueError(f"{count} replica rows expected, {len(rows)} stored")
        return [dict(zip(fields, json.loads(r[0]), strict=True)) for r in rows]

    def replicas(self, job_id: str, data: dict[str, Any]) -> list[Replica]:
        """A stored job's replicas, in rank order; ValueError (or KeyError) if unreadable."""
        count = self.in_parts(data)
        if count is None:
            return [Replica.from_json(d) for d in self.docs(job_id, data)]
        return self.part(job_id, count, 0, count)

    @staticmethod
    def in_parts(data: dict[str, Any]) -> int | None:
        """The job row's replica row count when `part` can read them (this version's fields);
        None when only whole."""
        if COUNT_KEY not in data or tuple(data.get(FIELDS_KEY, ())) != _FIELDS:
            return None
        return int(data[COUNT_KEY])

    def part(self, job_id: str, count: int, start: int, stop: int) -> list[Replica]:
        """Replicas `start` to `stop` of a job of `count` rows; ValueError if rows are missing."""
        rows = self.db.execute(
            "SELECT data FROM replicas WHERE job_id=? AND idx>=? AND idx<? ORDER BY idx",
            (job_id, start, stop)).fetchall()
        if len(rows) != stop - start:
            missing = stop - start - len(rows)
            raise ValueError(f"{count} replica rows expected, {missing} of rows {start} to "
                             f"{stop - 1} missing")
        out = []
        for values in json.loads(f"[{','.join(r[0] for r in rows)}]"):
            r = object.__new__(Replica)
            r.__dict__ = d = dict(zip(_FIELDS, values, strict=True))
            d["state"] = _STATES[d["state"]]
            out.append(r)
        return out

    def loaded(self, job: Job, data: dict[str, Any]) -> None:
        """`job` was read from rows this connection may compare against from now on."""
        if COUNT_KEY in data:
            self._known[job.id] = tuple(job.replicas)
        else:  # stored whole, before rows: its first write writes every row
            self._known.pop(job.id, None)
