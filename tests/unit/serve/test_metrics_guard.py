"""`/metrics` under `perdure serve` answers for every job it can read, whatever one bad row
holds (issue 20.3: a job stored with `hang_seconds: .inf` made every scrape a 500)."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from perdure.cli.common import make_job
from perdure.core.spec import default_cluster, parse_job_spec
from perdure.serve.app import create_app
from perdure.serve.auth import Auth
from perdure.serve.context import ServeContext
from perdure.store.sqlite import Store

SPEC = "name: %s\npools: [{name: w, command: [python, t.py]}]\n"
TOKEN = "t" * 32


def _jobs_in_metrics(text: str) -> set[str]:
    return {s.labels["job"] for f in text_string_to_metric_families(text)
            if f.name == "perdure_job_retries" for s in f.samples}


def test_one_unreadable_job_leaves_the_others_in_metrics(tmp_path: Path) -> None:
    cluster = default_cluster(2)
    store = Store(tmp_path / "perdure.db")
    good = make_job(parse_job_spec(SPEC % "good"), str(tmp_path), cluster)
    bad = make_job(parse_job_spec(SPEC % "bad"), str(tmp_path), cluster)
    store.submit(good)
    store.submit(bad)
    # What an older version stored for `hang_seconds: .inf`: JSON's null for the infinity.
    spec = json.loads(bad.spec.model_dump_json())
    spec["watchdog"]["hang_seconds"] = None
    with store.transaction() as db:
        db.execute("UPDATE jobs SET spec=? WHERE id=?", (json.dumps(spec), bad.id))
    also_bad = make_job(parse_job_spec(SPEC % "garbled"), str(tmp_path), cluster)
    store.submit(also_bad)
    with store.transaction() as db:
        db.execute("UPDATE jobs SET data=? WHERE id=?", ('{"replicas": 7}', also_bad.id))
    store.close()

    app = create_app(ServeContext(tmp_path, cluster, Auth(TOKEN), tmp_path))
    with TestClient(app) as client:
        r = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text
    assert _jobs_in_metrics(r.text) == {good.id}
