"""The test hosts' traffic stays on their bridge (issue 20, item 18), without starting Ray.

A client in the root namespace reaches a host only while the bridge holds the host's subnet;
otherwise its packets leave by the machine's default route. These check the guard (a missing
route is refused before any client connects), the teardown order (clients first) and the
cleanup of what a run killed halfway left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import hosts as h
import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or sys.platform != "linux",
                                reason="network namespaces need root on Linux")


def _links() -> str:
    return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout


def test_a_host_the_bridge_does_not_route_is_refused() -> None:
    hosts = h.make_hosts({"a": 1}, start=False)
    try:
        hosts.assert_routed()
        assert "RAY_USAGE_STATS_ENABLED" in hosts.env()
        # the bridge loses its address (so its route): a.b.c.10 would go out of the default route
        subprocess.run(["ip", "addr", "del", f"{hosts.gateway}/24", "dev", hosts.bridge],
                       check=True)
        with pytest.raises(h.OffBridge, match=rf"not on the test bridge {hosts.bridge}"):
            hosts.env()  # what every client of the cluster is started with
    finally:
        hosts.close()
    assert hosts.bridge not in _links()
    assert not (h.REGISTRY / f"{hosts.suffix}.json").exists()


def test_clients_stop_before_the_bridge_goes() -> None:
    hosts = h.make_hosts({"a": 1}, start=False)
    address = hosts.hosts["a"].address
    server = subprocess.Popen(
        ["ip", "netns", "exec", hosts.hosts["a"].netns, sys.executable, "-c",
         f"import socket, time; s = socket.create_server(('{address}', 7000)); "
         "c = s.accept(); time.sleep(120)"])
    client = None
    try:
        code = (f"import socket, time\nwhile True:\n    try:\n"
                f"        c = socket.create_connection(('{address}', 7000), timeout=1); break\n"
                f"    except OSError: time.sleep(0.1)\nprint('up', flush=True)\ntime.sleep(120)\n")
        client = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  text=True, env=hosts.env())
        assert client.stdout is not None and client.stdout.readline().strip() == "up"
        hosts.close()  # a client that outlived its test: stopped first
        assert client.wait(timeout=10) == -signal.SIGKILL
    finally:
        for proc in (client, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        hosts.close()


def test_what_a_killed_run_left_is_removed_and_its_subnet_avoided() -> None:
    maker = subprocess.Popen([sys.executable, "-c",
                              "import sys, time, hosts; x = hosts.make_hosts({'a': 1}, "
                              "start=False); print(x.suffix, x.subnet, flush=True); "
                              "time.sleep(120)"],
                             cwd=Path(h.__file__).parent, stdout=subprocess.PIPE, text=True)
    assert maker.stdout is not None
    suffix, subnet = maker.stdout.readline().split()
    record = json.loads((h.REGISTRY / f"{suffix}.json").read_text())
    assert record["subnet"] == subnet
    assert any(str(n) == subnet for n in h.taken())  # a live run's subnet is not picked
    maker.kill()  # the run dies: namespaces, veths, bridge and record are left
    maker.wait()
    assert f"prb{suffix}" in _links()
    removed = h.clean_stale()
    assert f"prb{suffix}" in removed and f"prd{suffix}a" in removed
    assert f"prb{suffix}" not in _links() and not Path(f"/run/netns/prd{suffix}a").exists()
    assert not (h.REGISTRY / f"{suffix}.json").exists()
