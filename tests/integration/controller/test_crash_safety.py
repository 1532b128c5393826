"""A controller SIGKILLed mid-run and started again loses nothing and duplicates nothing."""

from __future__ import annotations

import signal
import time

from tests.helpers.harness import Perdure, alive_replica_processes

# Replicas log each launch, then run until the test creates $GO (so they outlive the first
# controller and are re-attached by the second however loaded the machine is); the primary
# exits 0 then. Exit 3 if $GO never comes: the job fails instead of hanging.
WORKER = "\n".join([
    "import os, sys, time",
    "open(os.environ['LAUNCHES'], 'a').write(os.environ['PERDURE_REPLICA'] + '\\n')",
    "deadline = time.time() + 300",
    "while not os.path.exists(os.environ['GO']) and time.time() < deadline:",
    "    time.sleep(0.05)",
    "sys.exit(0 if os.path.exists(os.environ['GO']) else 3)",
])


def test_controller_sigkill_mid_run_reconciles(perdure: Perdure) -> None:
    launches, go = perdure.root / "launches.txt", perdure.root / "go"
    spec = perdure.spec("crash", 3, ["python", "-c", WORKER],
                        env={"LAUNCHES": str(launches), "GO": str(go)})
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
    again = perdure.popen("controller", "--exit-when-idle")
    perdure.wait(job, lambda d: any("re-attached to 3 replicas" in e["message"]
                                    for e in d["events"]), timeout=120)
    assert sorted(alive_replica_processes(perdure.state)) == pids  # the same, not relaunched
    go.touch()
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0, out
    d = perdure.describe(job)
    assert d["state"] == "SUCCEEDED", d
    assert sorted(launches.read_text().split()) == ["worker-0", "worker-1", "worker-2"]
    assert alive_replica_processes(perdure.state) == []


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
