"""Fuzz every operation of /openapi.json (schemathesis): no 5xx, no traceback, ever.

The server runs `--no-controller` over a state dir with one finished job, so fuzzed specs are
stored but never run (no random command is ever started). The default run sends a few
examples per operation; `make test-serve-fuzz` (marker serve_fuzz) sends 400 each.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from serve_harness import Server, spec, start_server, stop_server

schemathesis = pytest.importorskip("schemathesis")

EXAMPLES = 12
LONG_EXAMPLES = int(os.environ.get("PERDURE_FUZZ_EXAMPLES", "400"))
_turn = itertools.count()


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    first = start_server(tmp)
    try:
        with first.client() as c:
            job = first.submit(c, spec("known", "print('known job')"))
            first.wait_state(c, job, {"SUCCEEDED"})
    finally:
        stop_server(first)
    s = start_server(tmp, "--no-controller")
    try:
        yield s, job
    finally:
        out = stop_server(s)
        assert "Traceback" not in out or "internal error" not in out, out


def app_schema() -> dict[str, Any]:
    """The schema the server serves, built from its app (schemathesis' lazy loader, which
    would fetch it from the live server, does not run under pytest 9)."""
    from perdure.core.clusterspec import default_cluster
    from perdure.serve.app import create_app
    from perdure.serve.auth import Auth
    from perdure.serve.context import ServeContext

    ctx = ServeContext(Path("/nonexistent"), default_cluster(1), Auth("x" * 32), Path.cwd())
    return create_app(ctx).openapi()


RAW = app_schema()
schema = schemathesis.openapi.from_dict(RAW)


def test_the_live_server_serves_this_schema(fuzz_server: tuple[Server, str]) -> None:
    s, _ = fuzz_server
    with s.client() as c:
        assert c.get("/openapi.json").json() == RAW


def check(case: Any, fuzz_server: tuple[Server, str]) -> None:
    s, job = fuzz_server
    params = case.path_parameters or {}
    if "job_id" in params and next(_turn) % 2:  # half the time, a job that exists
        params["job_id"] = job
    if "name" in params and next(_turn) % 2:
        params["name"] = "a"
    headers = {"Authorization": f"Bearer {s.token}", "Accept": "application/json"}
    response = case.call(base_url=s.url, headers=headers, timeout=30)
    assert response.status_code < 500, (case.method, case.formatted_path, response.text)
    text = response.text
    assert "Traceback" not in text and 'File "' not in text, text[:500]


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          database=None)
def test_no_server_errors_and_no_tracebacks(case: Any, fuzz_server: tuple[Server, str]) -> None:
    check(case, fuzz_server)


@pytest.mark.serve_fuzz
@schema.parametrize()
@settings(max_examples=LONG_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          database=None)
def test_long_fuzz(case: Any, fuzz_server: tuple[Server, str]) -> None:
    check(case, fuzz_server)
