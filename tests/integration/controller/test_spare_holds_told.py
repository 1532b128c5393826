"""The controller tells every backend the spare nodes each attempt holds (`hold_nodes`) and
the quarantined nodes (`fence_nodes`), and tells them again when it starts over: a backend
that keeps spares warm (Ray) or allocated (Slurm, Kubernetes) learns them the same way.

Real sqlite and the real controller loop on the fake backend (no processes: fast)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from perdure.backends.base import NodeInfo
from perdure.backends.fake import FakeBackend, FakeRun
from perdure.controller.loop import Controller
from perdure.core.clusterspec import ClusterSpec, NodeSpec
from perdure.core.events import HoldNodes
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec
from perdure.core.states import JobState
from perdure.store.sqlite import Store

NODES = ("a", "b", "c")


def controller(tmp: Path, backend: FakeBackend) -> Controller:
    cluster = ClusterSpec(nodes=[NodeSpec(name=n, slots=1) for n in NODES])
    return Controller(tmp, Store(tmp / "perdure.db"), backend, cluster,
                      LaunchSettings(str(tmp), sys.executable), interval=0.005)


def test_holds_reach_the_backend_per_attempt_and_again_after_a_restart(tmp_path: Path) -> None:
    backend = FakeBackend([NodeInfo(n, 1) for n in NODES], lambda launch: FakeRun())
    ctl = controller(tmp_path, backend)
    ctl.start()
    spec = JobSpec.model_validate({"name": "spare", "pools": [
        {"name": "w", "replicas": 2, "spares": 1, "command": ["python", "t.py"]}]})
    job = Job(id="spare-000001", spec=spec, spec_dir="/", created=time.time(),
              replicas=make_replicas(spec))
    ctl.store.submit(job)
    deadline = time.monotonic() + 20
    ctl.run(until=lambda: bool(backend.holds) or time.monotonic() > deadline)
    (spare,) = set(NODES) - {launch.node for launch in backend.launched}
    assert backend.holds == [HoldNodes(job.id, 1, (spare,))]
    assert backend.fenced == {}
    ctl.close()

    again = FakeBackend([NodeInfo(n, 1) for n in NODES], lambda launch: FakeRun())
    again.procs.update(backend.procs)  # its replicas run on: the new controller adopts them
    ctl = controller(tmp_path, again)
    ctl.start()
    assert again.holds == [HoldNodes(job.id, 1, (spare,))]  # told before the first tick
    ctl.store.command("cancel", job.id)  # the attempt ends: its hold with it
    deadline = time.monotonic() + 20
    ctl.run(until=lambda: ctl.store.job(job.id).state.terminal  # type: ignore[union-attr]
            or time.monotonic() > deadline)
    ctl.close()
    assert ctl.store.job(job.id).state is JobState.CANCELLED  # type: ignore[union-attr]
    assert again.holds[-1] == HoldNodes(job.id, 1, ())
