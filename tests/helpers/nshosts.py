"""Subnets for test hosts made as network namespaces (integration/nshosts.sh makes them)."""

from __future__ import annotations

import ipaddress
import os
import random
import subprocess
import time


def free_subnet(lowest: int, highest: int) -> ipaddress.IPv4Network:
    """A random 10.<lowest..highest>.x.0/24 that no route of this machine touches, so that
    parallel runs never collide. Each cluster kind keeps to its own range of second octets
    (Slurm 20-63, Ray 64-250, Kubernetes 251-253). RuntimeError when none is free."""
    routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True,
                            text=True, check=True).stdout
    used = [ipaddress.ip_network(w, strict=False) for line in routes.splitlines()
            for w in line.split()[:1] if w[:1].isdigit()]
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{rng.randint(lowest, highest)}.{rng.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError(f"no free 10.{lowest}-{highest}.x.0/24 for test hosts")
