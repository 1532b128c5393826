"""`spares: 1` on Slurm: the attempt's allocation holds the spare node, and a lost host's
replicas are launched on it at once: no new sbatch, no queue wait."""

from __future__ import annotations

import time

import pytest
from slurmtest import SlurmPerdure
from tests.helpers.stopping import stop_controller

THREE = {"a": 2, "b": 2, "c": 2}


@pytest.mark.timeout(300)
def test_host_b_dies_and_its_replicas_go_to_the_spare_the_allocation_holds(
        slurm_perdure: SlurmPerdure) -> None:
    p = slurm_perdure
    flag = p.root / "finish"
    wait = ("import os, socket, time\nprint('up on', socket.gethostname(), flush=True)\n"
            f"while not os.path.exists({str(flag)!r}):\n    time.sleep(0.2)")
    spec = p.spec("spared", replicas=4, command=["python", "-c", wait],
                  pool={"spares": 1})
    cluster = str(p.slurm_cluster(THREE))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(spec), "--cluster", cluster)
        d = p.wait("spared", lambda d: d["state"] == "RUNNING" and d["spares"] == {"c": 2},
                   timeout=120)
        assert sorted(x["node"] for x in d["replicas"]) == ["a", "a", "b", "b"], d["replicas"]
        ours = [j for j in p.slurm.run("squeue", "-h", "-t", "all", "-o", "%i %j %T %N"
                                       ).splitlines() if ".spared-" in j]
        assert len(ours) == 1, ours  # one allocation: the replicas' nodes and the spare
        held = p.slurm.run("scontrol", "show", "hostnames", ours[0].split()[3]).split()
        assert held == ["a", "b", "c"], ours
        killed = time.time()
        p.slurm.kill("b")
        d = p.wait("spared", lambda d: d["state"] == "RUNNING" and sorted(
            x["node"] for x in d["replicas"]) == ["a", "a", "c", "c"], timeout=60)
        moved = time.time() - killed
        messages = [e["message"] for e in d["events"]]
        assert any(m.startswith("spare node c took") for m in messages), messages
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
        after = [j for j in p.slurm.run("squeue", "-h", "-t", "all", "-o", "%i %j %T %N"
                                        ).splitlines() if ".spared-" in j]
        assert [j.split()[0] for j in after] == [ours[0].split()[0]], (ours, after)  # no sbatch
        assert moved < 30, moved
        flag.touch()
        d = p.wait("spared", lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=60)
        assert d["state"] == "SUCCEEDED", d["events"][-10:]
    finally:
        stop_controller(controller)
