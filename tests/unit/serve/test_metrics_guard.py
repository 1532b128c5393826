"""`/metrics` under `perdure serve` answers for every job it can read, whatever one bad row
holds (issue 20.3: a job stored with `hang_seconds: .inf` made every scrape a 500)."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from perdure.controller.newjob import make_job
from perdure.core.clusterspec import default_cluster
from perdure.core.model import Job
from perdure.core.spec import parse_job_spec
from perdure.serve.app import create_app
from perdure.serve.auth import Auth
from perdure.serve.context import ServeContext
from perdure.store.sqlite import Store

SPEC = "name: %s\npools: [{name: w, command: [python, t.py]}]\n"
TOKEN = "t" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _jobs_in_metrics(text: str) -> set[str]:
    return {s.labels["job"] for f in text_string_to_metric_families(text)
            if f.name == "perdure_job_retries" for s in f.samples}


def _stored(store: Store, tmp_path: Path, name: str) -> Job:
    job = make_job(parse_job_spec(SPEC % name), str(tmp_path), default_cluster(2), str(tmp_path))
    store.submit(job)
    return job


def _unreadable_spec(store: Store, job: Job) -> None:
    """What an older version stored for `hang_seconds: .inf`: JSON's null for the infinity."""
    spec = json.loads(job.spec.model_dump_json())
    spec["watchdog"]["hang_seconds"] = None
    with store.transaction() as db:
        db.execute("UPDATE jobs SET spec=?, attempt=1 WHERE id=?", (json.dumps(spec), job.id))


def _app(tmp_path: Path) -> TestClient:
    return TestClient(create_app(ServeContext(tmp_path, default_cluster(2), Auth(TOKEN),
                                              tmp_path)))


def test_one_unreadable_job_leaves_the_others_in_metrics(tmp_path: Path) -> None:
    store = Store(tmp_path / "perdure.db")
    good = _stored(store, tmp_path, "good")
    bad = _stored(store, tmp_path, "bad")
    _unreadable_spec(store, bad)
    garbled = _stored(store, tmp_path, "garbled")
    with store.transaction() as db:
        db.execute("UPDATE jobs SET data=? WHERE id=?", ('{"replicas": 7}', garbled.id))
    store.close()
    with _app(tmp_path) as client:
        r = client.get("/metrics", headers=AUTH)
    assert r.status_code == 200, r.text
    # the unreadable spec costs only that job's goodput; the garbled row, its series
    assert _jobs_in_metrics(r.text) == {good.id, bad.id}
    assert f'perdure_job_goodput_ratio{{job="{bad.id}"}}' not in r.text


def test_the_jobs_list_shows_a_job_whose_spec_cannot_be_read(tmp_path: Path) -> None:
    store = Store(tmp_path / "perdure.db")
    good = _stored(store, tmp_path, "good")
    bad = _stored(store, tmp_path, "bad")
    _unreadable_spec(store, bad)
    store.close()
    with _app(tmp_path) as client:
        listed = client.get("/api/v1/jobs", headers=AUTH)
    assert listed.status_code == 200, listed.text
    jobs = {j["id"]: j for j in listed.json()["jobs"]}
    assert set(jobs) == {good.id, bad.id} and jobs[bad.id]["goodput"] is None


def test_a_spec_that_would_not_read_back_is_never_stored(tmp_path: Path) -> None:
    """Validation refuses `.inf`; a spec that got past it anyway (a bug) stays out of the
    store instead of becoming a job nothing can read."""
    import math

    import pytest

    from perdure.store.schema import StoreError

    store = Store(tmp_path / "perdure.db")
    job = make_job(parse_job_spec(SPEC % "inf"), str(tmp_path), default_cluster(2),
                   str(tmp_path))
    watchdog = job.spec.watchdog.model_construct(hang_seconds=math.inf, stragglers="report")
    spec = job.spec.model_copy(update={"watchdog": watchdog})
    with pytest.raises(StoreError, match="was not stored: its spec would not read back"):
        store.submit(Job(id=job.id, spec=spec, spec_dir=job.spec_dir, created=job.created,
                         replicas=job.replicas, updated=job.updated))
    assert store.job_rows() == []
