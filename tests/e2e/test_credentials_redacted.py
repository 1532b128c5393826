"""Credentials in a URL never reach what perdure shows (issue 36.5). A spec refuses them at
validate; a URL that reaches a replica by another way (its environment) and ends up in its
error is shown with its credentials hidden in `perdure run`'s output, `describe` (text and
JSON, error and events) and the API's job, events and timeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from perdure.core.clusterspec import default_cluster
from perdure.serve.app import create_app
from perdure.serve.auth import Auth
from perdure.serve.context import ServeContext

PERDURE = [sys.executable, "-m", "perdure.cli.main"]
SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"
URL = f"s3://AKIAIOSFODNN7EXAMPLE:{SECRET}@bucket/run"
TOKEN = "t" * 32


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PERDURE, "--state-dir", str(state), *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PERDURE_WARM_POOL": "0"})


def test_a_spec_with_credentials_in_its_checkpoint_url_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: leak\npools: [{{name: w, command: [python, t.py]}}]\n"
                    f"checkpoint: {{dir: '{URL}'}}\n")
    for command in (["validate", str(spec)], ["run", str(spec)],
                    ["export", "k8s", str(spec), "--image", "img:1"]):
        done = cli(tmp_path / "state", *command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "checkpoint.dir: holds credentials" in done.stderr, done.stderr
        assert SECRET not in done.stdout + done.stderr


def test_credentials_a_replica_reports_are_hidden_everywhere(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(
        "import os\n"
        "url = os.environ['DATA_URL']\n"
        "print('reading', url, flush=True)\n"
        "raise RuntimeError(f'cannot read {url}: Cannot combine AUTHORIZATION header')\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("name: leak\npools: [{name: w, command: [python, t.py]}]\n"
                    f"env: {{DATA_URL: '{URL}'}}\nrestart: {{max_job_retries: 0}}\n")
    state = tmp_path / "state"
    ran = cli(state, "run", str(spec))
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "s3://***@bucket/run" in ran.stdout, ran.stdout
    job_id = json.loads(cli(state, "ls", "--json").stdout)[0]["id"]
    text = cli(state, "describe", job_id)
    as_json = cli(state, "describe", job_id, "--json")
    assert "s3://***@bucket/run" in text.stdout and "RuntimeError" in text.stdout, text.stdout
    shown = {"run": ran.stdout + ran.stderr, "describe": text.stdout + text.stderr,
             "describe --json": as_json.stdout + as_json.stderr}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    app = create_app(ServeContext(state, default_cluster(2), Auth(TOKEN), tmp_path))
    with TestClient(app) as client:
        for path in (f"/api/v1/jobs/{job_id}", f"/api/v1/jobs/{job_id}/events",
                     f"/api/v1/jobs/{job_id}/timeline", "/api/v1/jobs"):
            r = client.get(path, headers=auth)
            assert r.status_code == 200, (path, r.text)
            shown[path] = r.text
    for where, output in shown.items():
        assert SECRET not in output and "AKIAIOSFODNN7EXAMPLE" not in output, where
    # the replica's own log stays as it printed it (like `docker logs`)
    assert SECRET in cli(state, "logs", job_id).stdout
