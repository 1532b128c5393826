"""A tick writes what it changed: a big job's replicas are rows, and a tick that changed one
replica writes about one row's bytes, not the job's ~2 MB of JSON; what a tick commits (and
only that) is what a new connection (a restarted controller) reads back."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from perdure.core.model import Job
from perdure.core.records import Event
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec
from perdure.core.states import JobState, ReplicaState
from perdure.store.sqlite import Store

REPLICAS = 4096


def big_job() -> Job:
    spec = JobSpec.model_validate({"name": "big", "pools": [
        {"name": "w", "replicas": REPLICAS, "command": ["python", "t.py"]}]})
    return Job("big-000001", spec, "/work", 1.0, replicas=make_replicas(spec))


def running(job: Job) -> Job:
    """`job` as a tick that launched every replica leaves it (a clone, as decide makes)."""
    job = job.clone()
    job.state, job.attempt = JobState.RUNNING, 1
    for r in job.own_all():
        r.state, r.node, r.launches = ReplicaState.RUNNING, f"n{r.rank // 8:05d}", 1
        r.launch_id = f"{job.id}.1.{r.name}.1"
    return job


def wal_bytes(store: Store) -> int:
    wal = Path(f"{store.path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def stored(path: Path, job_id: str) -> Job:
    """The job as a new connection reads it (a controller started after a crash)."""
    other = Store(path)
    try:
        job = other.job(job_id)
        assert job is not None
        return job
    finally:
        other.close()


def test_a_tick_that_changed_one_replica_writes_about_one_row(tmp_path: Path) -> None:
    store = Store(tmp_path / "perdure.db")
    store.db.execute("PRAGMA wal_autocheckpoint=0")  # the WAL's growth is what was written
    job = running(big_job())
    store.submit(job)
    whole = len(json.dumps(job.to_json()))
    assert whole > 500_000  # what the job row held, and each tick rewrote, before rows
    for step in range(1, 4):
        job = job.clone()
        job.own(job.replicas[step]).state = ReplicaState.STOPPING
        job.updated = float(step)
        before = wal_bytes(store)
        store.commit_tick([job], [Event(float(step), job.id, "decision", "stop one")], None,
                          step)
        written = wal_bytes(store) - before
        assert 0 < written < 64 * 1024, written  # a few pages, not the job's whole JSON
    back = stored(tmp_path / "perdure.db", job.id)
    assert [r.state for r in back.replicas] == [r.state for r in job.replicas]
    assert back.to_json() == job.to_json()


def test_a_tick_that_did_not_commit_is_written_whole_by_the_next(tmp_path: Path) -> None:
    """A tick whose transaction failed left nothing; the next tick writes its changes too
    (the rows it compares against are those committed, not those it tried to write)."""
    store = Store(tmp_path / "perdure.db")
    job = running(big_job())
    store.submit(job)
    failed = job.clone()
    failed.own(failed.replicas[5]).state = ReplicaState.EXITED
    bad = Event(2.0, job.id, None, "no kind")  # type: ignore[arg-type]  # NOT NULL: refused
    with pytest.raises(sqlite3.IntegrityError):
        store.commit_tick([failed], [bad], None, None)
    assert stored(tmp_path / "perdure.db", job.id).replicas[5].state is ReplicaState.RUNNING
    store.commit_tick([failed], [], None, None)
    back = stored(tmp_path / "perdure.db", job.id)
    assert back.replicas[5].state is ReplicaState.EXITED
    assert back.to_json() == failed.to_json()


def test_a_job_stored_whole_by_an_older_perdure_is_read_and_moved_to_rows(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "perdure.db")
    job = running(big_job())
    store.submit(job)
    store.db.execute("UPDATE jobs SET data=? WHERE id=?", (json.dumps(job.to_json()), job.id))
    store.db.execute("DELETE FROM replicas")
    old = stored(tmp_path / "perdure.db", job.id)
    assert old.to_json() == job.to_json()
    again = Store(tmp_path / "perdure.db")
    loaded = again.job(job.id)
    assert loaded is not None
    moved = loaded.clone()
    moved.own(moved.replicas[0]).restarts = 1
    again.commit_tick([moved], [], None, None)  # every row written: none were there
    assert stored(tmp_path / "perdure.db", job.id).to_json() == moved.to_json()
    doc = again.job_doc(job.id, again.db.execute(
        "SELECT data FROM jobs WHERE id=?", (job.id,)).fetchone()[0])
    assert len(doc["replicas"]) == REPLICAS and doc["replicas"][0]["restarts"] == 1


def test_members_encoded_once_a_round_read_back_as_each_tick_left_them(tmp_path: Path) -> None:
    """An elastic job's members are encoded once a round (kept by the tuple's identity):
    each committed round, and only it, is what a new connection reads back."""
    store = Store(tmp_path / "perdure.db")
    job = big_job()
    store.submit(job)
    job = running(job)
    names = tuple(r.name for r in job.replicas)
    for members in (names, names[:100], names[:100], names[8:100], ("w-5", "w-1")):
        job = job.clone()  # a later tick's copy: the same members tuple until a new round
        if members != job.members:
            job.members = members
        store.commit_tick([job], [], None, None)
        assert stored(store.path, job.id).members == members
    store.close()
