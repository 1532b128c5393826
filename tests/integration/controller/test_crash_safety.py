"""A controller SIGKILLed mid-run and started again loses nothing and duplicates nothing."""

from __future__ import annotations

import signal
import time

from conftest import Perdure, alive_replica_processes

# Replicas run ~8 s and log each launch; the primary exits 0 at the end.
WORKER = ("import os, time; open(os.environ['LAUNCHES'], 'a').write(os.environ['PERDURE_REPLICA'] "
          "+ '\\n'); time.sleep(8)")


def test_controller_sigkill_mid_run_reconciles(perdure: Perdure) -> None:
    launches = perdure.root / "launches.txt"
    spec = perdure.spec("crash", 3, ["python", "-c", WORKER], env={"LAUNCHES": str(launches)})
    cluster = perdure.cluster({"a": 2, "b": 2})
    job = perdure.cli("submit", str(spec), "--cluster", str(cluster)).stdout.strip()
    ctl = perdure.popen("controller", "--cluster", str(cluster))
    perdure.wait(job, lambda d: d["state"] == "RUNNING")
    pids = sorted(alive_replica_processes(perdure.state))
    assert len(pids) == 3
    ctl.send_signal(signal.SIGKILL)
    ctl.wait()
    time.sleep(1.0)
    assert sorted(alive_replica_processes(perdure.state)) == pids  # replicas kept running
    again = perdure.cli("controller", "--exit-when-idle", timeout=120)
    assert again.returncode == 0, again.stdout
    d = perdure.describe(job)
    assert d["state"] == "SUCCEEDED", d
    assert sorted(launches.read_text().split()) == ["worker-0", "worker-1", "worker-2"]
    assert alive_replica_processes(perdure.state) == []
    assert any("re-attached to 3 replicas" in e["message"] for e in d["events"]), d["events"]


def test_controller_killed_at_many_moments(perdure: Perdure) -> None:
    """SIGKILL the controller at several points of a job's life: it always ends well."""
    launches = perdure.root / "launches.txt"
    code = ("import os, sys, time; open(os.environ['LAUNCHES'], 'a').write("
            "os.environ['PERDURE_REPLICA'] + '\\n'); time.sleep(1.5); "
            "sys.exit(1 if os.environ['PERDURE_RESTART_COUNT'] == '0' and "
            "os.environ['RANK'] == '1' else 0)")
    spec = perdure.spec("moments", 2, ["python", "-c", code], env={"LAUNCHES": str(launches)})
    job = perdure.cli("submit", str(spec)).stdout.strip()
    for delay in (0.3, 0.9, 1.7, 2.6, 3.4):
        ctl = perdure.popen("controller", "--exit-when-idle")
        time.sleep(delay)
        ctl.send_signal(signal.SIGKILL)
        ctl.wait()
    final = perdure.cli("controller", "--exit-when-idle", timeout=120)
    assert final.returncode == 0
    d = perdure.describe(job)
    assert d["state"] == "SUCCEEDED", d["events"]
    assert alive_replica_processes(perdure.state) == []
    # never two processes for one replica at once: every launch of a replica is accounted for
    assert d["attempt"] <= 3
