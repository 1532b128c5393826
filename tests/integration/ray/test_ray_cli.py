"""CLI commands that reach replicas on Ray: chaos kill, the namespace lock."""

from __future__ import annotations

import time

import pytest
from raytest import RayPerdure
from tests.helpers.clusterjobs import describe


@pytest.mark.ray_long
def test_chaos_kill_on_ray_restarts_and_a_finished_replica_is_a_clear_message(
        ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    code = "import os, time; time.sleep(30 if os.environ['PERDURE_RESTART_COUNT'] == '0' else 1)"
    p.cli("submit", str(p.spec("victim", command=["python", "-c", code])))
    ctl = p.popen("controller", "--exit-when-idle")
    p.wait("victim", lambda d: d["state"] == "RUNNING", timeout=60)
    r = p.cli("chaos", "kill", "victim", "worker-0", "--signal", "TERM")
    assert r.stdout.startswith("sent SIGTERM to worker-0"), r.stdout + r.stderr
    out = ctl.communicate(timeout=120)[0]
    d = describe(p, "victim")
    assert d["state"] == "SUCCEEDED" and d["replicas"][0]["restarts"] == 1, out
    assert "exited 143 (SIGTERM)" in out
    r = p.cli("chaos", "kill", "victim", "worker-0", check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "is not running" in r.stderr


@pytest.mark.ray_long
def test_a_second_controller_on_the_same_namespace_is_refused(ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    first = p.popen("controller")
    try:
        time.sleep(6)  # it has taken the namespace
        other = p.root / "other-state"
        r = p.cli("--state-dir", str(other), "controller", "--cluster", str(p.cluster_file),
                  check=False, timeout=60)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "another controller" in r.stderr and p.namespace in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    finally:
        first.kill()
        first.wait()
