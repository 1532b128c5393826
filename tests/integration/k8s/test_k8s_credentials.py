"""Credentials on `backend: kubernetes`: a job's credential variable reaches its replicas from
the Secret `<job name>-credentials`, never from the spec nor in a pod's manifest; without the
Secret the job fails at once, saying which Secret to make."""

from __future__ import annotations

import hashlib
import json

import pytest
from k8stest import K8sPerdure
from tests.helpers.clusterjobs import describe

SHOW = ("import hashlib, os; print('token', hashlib.sha256(os.environ['API_TOKEN'].encode())"
        ".hexdigest(), flush=True)")


@pytest.mark.k8s_long
@pytest.mark.timeout(300)
def test_a_credential_comes_from_the_jobs_secret(k8s_perdure: K8sPerdure) -> None:
    p = k8s_perdure
    cluster = str(p.k8s_cluster({"a": 1}))
    spec = str(p.spec("creds", replicas=1, command=["python", "-c", SHOW],
                      env={"API_TOKEN": "in-the-spec-not-used"}))
    r = p.cli("run", spec, "--cluster", cluster, check=False, timeout=180)
    assert "FAILED" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    error = describe(p, "creds")["error"]
    assert "creds-credentials" in json.dumps(error) and "kubectl create secret" in json.dumps(
        error), error
    p.k8s.kubectl("create", "secret", "generic", "creds-credentials",
                  "--from-literal=API_TOKEN=the-secret-value")
    try:
        r = p.cli("run", spec, "--cluster", cluster, check=False, timeout=180)
        assert "SUCCEEDED" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
        out = "".join(log.read_text() for log in p.state.glob("logs/creds-*/attempt-*/*.out"))
        want = hashlib.sha256(b"the-secret-value").hexdigest()
        assert f"token {want}" in out, out[-1000:]
        records = "".join(f.read_text() for f in p.state.glob("launches/creds-*/launch.json"))
        assert "in-the-spec-not-used" not in records
    finally:
        p.k8s.kubectl("delete", "secret", "creds-credentials")
