"""The sqlite store under bad input: job references, unreadable rows, modes, bad files."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec
from perdure.store.schema import JobRefError, StoreError, UnreadableJob
from perdure.store.sqlite import Store

SPEC = {"name": "a", "pools": [{"name": "w", "command": ["python"]}]}


def job(name: str, job_id: str, created: float) -> Job:
    spec = JobSpec.model_validate({**SPEC, "name": name})
    return Job(id=job_id, spec=spec, spec_dir="/", created=created, replicas=make_replicas(spec))


def test_job_references_are_literal_and_never_guessed(tmp_path: Path) -> None:
    store = Store(tmp_path / "s" / "perdure.db")
    for i, (name, jid) in enumerate([("x", "x-aaa111"), ("x", "x-aab222"), ("y", "y-abc333")]):
        store.submit(job(name, jid, 1000.0 + i))
    for empty in ("", "  "):
        with pytest.raises(JobRefError, match="empty"):
            store.resolve(empty)
    assert store.resolve("%") is None and store.resolve("_") is None
    assert store.resolve("x-a_a111") is None and store.resolve("x-aa%") is None
    with pytest.raises(JobRefError) as err:
        store.resolve("x-aa")
    assert "x-aaa111" in str(err.value) and "x-aab222" in str(err.value)
    assert store.resolve("x-aab") == "x-aab222"
    assert store.resolve("x") == "x-aab222"  # a name: its newest job
    assert store.resolve("y-abc333") == "y-abc333"


def test_state_dir_and_database_are_private(tmp_path: Path) -> None:
    store = Store(tmp_path / "state" / "perdure.db")
    store.submit(job("a", "a-000001", 1.0))
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    for name in ("perdure.db", "perdure.db-wal"):
        assert stat.S_IMODE((tmp_path / "state" / name).stat().st_mode) == 0o600, name


def test_a_reader_never_creates_a_state_dir(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no perdure state dir"):
        Store(tmp_path / "typo" / "perdure.db", create=False)
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("content", [b"not a database at all, really" * 200, b"\0" * 4096])
def test_a_corrupt_database_is_named_with_its_cause(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "perdure.db").write_bytes(content)
    for create in (True, False):
        with pytest.raises(StoreError) as err:
            Store(tmp_path / "perdure.db", create=create)
        assert str(tmp_path / "perdure.db") in str(err.value)
        assert "not a perdure database" in str(err.value)


def test_an_unreadable_job_is_failed_alone(tmp_path: Path) -> None:
    store = Store(tmp_path / "perdure.db")
    good, bad = job("good", "good-000001", 1.0), job("bad", "bad-000002", 2.0)
    store.submit(good)
    store.submit(bad)
    # What an older perdure stored for `stop_grace_seconds: .inf`: JSON null.
    spec = json.loads(bad.spec.model_dump_json())
    spec["restart"]["stop_grace_seconds"] = None
    data = bad.to_json()
    data["state"], data["replicas"][0]["state"] = "RUNNING", "RUNNING"
    data["replicas"][0]["launch_id"] = "bad-000002.1.w-0.1"
    store.db.execute("UPDATE jobs SET spec=?, data=?, state='RUNNING' WHERE id=?",
                     (json.dumps(spec), json.dumps(data), bad.id))
    with pytest.raises(UnreadableJob, match="bad-000002 cannot be read back"):
        store.job(bad.id)
    readable, unreadable = store.unfinished()
    assert [j.id for j in readable] == [good.id]
    assert [e.job_id for e in unreadable] == [bad.id]
    assert store.fail_unreadable(unreadable[0], time.time()) == ["bad-000002.1.w-0.1"]
    rows = {r["id"]: r["state"] for r in store.job_rows()}
    assert rows == {good.id: "QUEUED", bad.id: "FAILED"}
    assert "cannot be read back" in store.events(bad.id)[-1].message
    readable, unreadable = store.unfinished()
    assert [j.id for j in readable] == [good.id] and unreadable == []
