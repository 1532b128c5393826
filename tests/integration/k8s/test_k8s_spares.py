"""`spares: 1` on `backend: kubernetes`: the attempt holds an agent pod on the spare node, and
a lost host's replicas start in it at once: no pod made, no scheduling wait."""

from __future__ import annotations

import time

import pytest
from k8stest import K8sPerdure
from tests.helpers.stopping import stop_controller


@pytest.mark.k8s_long
@pytest.mark.timeout(300)
def test_host_b_dies_and_its_replicas_go_to_the_spare_pod(k8s_perdure: K8sPerdure) -> None:
    p = k8s_perdure
    flag = p.root / "finish"
    wait = ("import os, socket, time\nprint('up on', socket.gethostname(), flush=True)\n"
            f"while not os.path.exists({str(flag)!r}):\n    time.sleep(0.2)")
    spec = p.spec("spared", replicas=4, command=["python", "-c", wait], pool={"spares": 1})
    cluster = str(p.k8s_cluster({"a": 2, "b": 2, "c": 2}))
    controller = p.popen("controller", "--cluster", cluster)
    try:
        p.cli("submit", str(spec), "--cluster", cluster)
        d = p.wait("spared", lambda d: d["state"] == "RUNNING" and d["spares"] == {"c": 2},
                   timeout=120)
        assert sorted(x["node"] for x in d["replicas"]) == ["a", "a", "b", "b"], d["replicas"]
        log = p.state / "kubernetes" / "kubernetes.log"
        deadline = time.monotonic() + 60
        while log.read_text().count(" made for node ") < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert " made for node c" in log.read_text(), log.read_text()
        p.k8s.wait_for("pods -l perdure.dev/state", lambda ps: sum(
            x["status"].get("phase") == "Running" for x in ps["items"]) == 3, timeout=60)
        killed = time.time()
        p.k8s.kill("b")
        d = p.wait("spared", lambda d: d["state"] == "RUNNING" and sorted(
            x["node"] for x in d["replicas"]) == ["a", "a", "c", "c"], timeout=60)
        moved = time.time() - killed
        print(f"spare: b's replicas running on c {moved:.2f} s after host b died")
        messages = [e["message"] for e in d["events"]]
        assert any(m.startswith("spare node c took") for m in messages), messages
        assert all(x["restarts"] == 0 for x in d["replicas"]), d["replicas"]
        assert log.read_text().count(" made for node ") == 3, log.read_text()  # no new pod
        assert moved < 30, moved
        flag.touch()
        d = p.wait("spared", lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=60)
        assert d["state"] == "SUCCEEDED", d["events"][-10:]
    finally:
        stop_controller(controller)
