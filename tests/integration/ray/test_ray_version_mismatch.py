"""A controller whose Ray differs from the cluster's says so in one line: both versions and the
ray==X to install (Ray's own error is several lines that name neither perdure nor a fix)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from hosts import HostsUnavailable, make_hosts
from raytest import RayPerdure

OTHER = os.environ.get("PERDURE_TEST_OTHER_RAY")  # `ray` of another Ray version's venv


@pytest.mark.ray_long
@pytest.mark.timeout(300)
def test_a_cluster_on_another_ray_is_named_in_one_line(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    if not OTHER:
        pytest.skip("PERDURE_TEST_OTHER_RAY names no `ray` command of another Ray version")
    version = subprocess.run([OTHER, "--version"], capture_output=True, text=True,
                             check=True).stdout
    theirs = re.findall(r"\d+\.\d+\.\d+", version)[0]
    assert theirs != ray.__version__, "PERDURE_TEST_OTHER_RAY runs the same Ray as this venv"
    try:
        hosts = make_hosts({}, ray=OTHER)  # a head alone
    except HostsUnavailable as exc:
        pytest.skip(f"no Ray hosts: {exc}")
    try:
        p = RayPerdure(tmp_path)
        p.hosts = hosts
        p.namespace = "versions"
        r = p.cli("controller", "--cluster", str(p.ray_cluster()), check=False, timeout=180)
        assert r.returncode == 2, r.stdout + r.stderr
        assert (f"ray: the controller has ray {ray.__version__}, the cluster at "
                f"{hosts.head_address} runs ray {theirs}; install ray=={theirs}") in r.stderr, \
            r.stderr
        assert "Traceback" not in r.stderr and "Version mismatch" not in r.stderr, r.stderr
    finally:
        hosts.close()
