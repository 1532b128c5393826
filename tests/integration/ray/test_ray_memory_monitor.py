"""Ray's memory monitor kills a launch's actor: the job fails OUT_OF_MEMORY, as over memory_mb.

A host of its own ("m") whose raylet kills workers once the machine's memory in use passes a
threshold set just above what is in use now; the replica then allocates past it (it has no
memory_mb: only Ray's monitor can stop it). The monitor kills the newest worker, the launch's
actor, whose supervisor and replica die with it.
"""

from __future__ import annotations

import time

import pytest
from raytest import RayPerdure

GIB = 2**30
HEADROOM = 2 * GIB  # the monitor fires once this much more is in use than now
ALLOCATE = 6 * GIB  # what the replica asks for, 256 MiB at a time (each page touched)
GROW = ("import time\n"
        "chunks = []\n"
        f"for _ in range({ALLOCATE // (256 * 2**20)}):\n"
        "    chunks.append(bytearray(256 * 2**20))\n"
        "    print('allocated', len(chunks) * 256, 'MiB', flush=True)\n"
        "    time.sleep(0.2)\n"
        "time.sleep(120)\n")


def _memory() -> tuple[int, int]:
    """The machine's total memory and what is in use (total - available), as Ray counts."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0]) * 1024
    return info["MemTotal"], info["MemTotal"] - info["MemAvailable"]


@pytest.mark.ray_long
@pytest.mark.timeout(300)
def test_ray_memory_monitor_kill_fails_the_job_out_of_memory(ray_perdure: RayPerdure) -> None:
    p = ray_perdure
    total, used = _memory()
    if used + HEADROOM + ALLOCATE > total * 0.9:
        pytest.skip(f"needs {(HEADROOM + ALLOCATE) / GIB:.0f} GiB free beyond the "
                    f"{used / GIB:.1f} GiB in use of {total / GIB:.1f} GiB")
    threshold = (used + HEADROOM) / total
    host = p.hosts.hosts.get("m") or p.hosts.add_host("m", 20, {"perdure_node_m": 1.0}, 1)
    p.hosts.start("m", env={"RAY_memory_usage_threshold": f"{threshold:.4f}",
                            "RAY_memory_monitor_refresh_ms": "100"})
    try:
        p.ray_cluster({"m": 1})
        spec = p.spec("grow", replicas=1, command=["python", "-c", GROW])
        started = time.time()
        r = p.cli("run", str(spec), check=False, timeout=240)
        d = p.describe("grow")
        assert d["state"] == "FAILED", (r.stdout[-2000:], d["events"][-10:])
        assert d["error"]["code"] == "OUT_OF_MEMORY", d["error"]
        assert "memory" in d["error"]["message"].lower(), d["error"]
        assert time.time() - started < 200
        # Everything it printed until the monitor killed it, the last lines (after the last
        # pull) read through the node's agent, the launch's actor being gone.
        logs = p.cli("logs", "grow", "--stdout").stdout
        on_node = next(p.hosts.temp_root.glob(
            "m*/session_*/perdure/*/launches/grow-*/stdout.log"))
        assert "allocated" in logs and logs == on_node.read_text(), (logs, on_node.read_text())
    finally:
        p.hosts.kill("m")
        assert not host.pids()
