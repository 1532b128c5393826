"""The API's nodes list GPUs held and free (GET /api/v1/nodes reads views.nodes), from a real
state dir; a state dir made before GPUs gains the column."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from perdure.core.clusterspec import ClusterSpec, NodeSpec
from perdure.core.model import Job
from perdure.core.records import Node
from perdure.core.replica import make_replicas
from perdure.core.spec import parse_job_spec
from perdure.core.states import JobState, ReplicaState
from perdure.serve import views
from perdure.serve.models import NodeOut
from perdure.store.schema import SCHEMA
from perdure.store.sqlite import Store

SPEC = "name: j\npools: [{name: w, replicas: 2, gpus: 2, command: [python, t.py]}]\n"


def test_nodes_show_gpus_used_by_running_replicas(tmp_path: Path) -> None:
    store = Store(tmp_path / "state" / "perdure.db")
    store.save_nodes([Node("a", 8, gpus=4), Node("b", 8)])
    spec = parse_job_spec(SPEC)
    job = Job("j-1", spec, "/", 0.0, state=JobState.RUNNING, replicas=make_replicas(spec))
    job.replicas[0].node, job.replicas[0].devices = "a", [0, 1]
    job.replicas[0].state = ReplicaState.RUNNING
    store.submit(job)
    cluster = ClusterSpec(nodes=[NodeSpec(name="a", slots=8, gpus=4)])
    out = {n["name"]: NodeOut(**n) for n in views.nodes(store, cluster)}
    assert (out["a"].gpus, out["a"].gpus_used, out["b"].gpus) == (4, 2, 0)


def test_a_state_dir_from_before_gpus_gets_the_column(tmp_path: Path) -> None:
    path = tmp_path / "state" / "perdure.db"
    path.parent.mkdir(mode=0o700)
    db = sqlite3.connect(path)
    old = SCHEMA.replace(",\n    gpus INTEGER NOT NULL DEFAULT 0", "")
    assert old != SCHEMA
    db.executescript(old)
    db.execute("INSERT INTO nodes VALUES ('a', 4, 'READY')")
    db.commit()
    db.close()
    path.chmod(0o600)
    assert Store(path, create=False).nodes()["a"].gpus == 0  # read-only: no column, no GPUs
    store = Store(path)
    store.save_nodes([Node("a", 4, gpus=2)])
    assert store.nodes()["a"].gpus == 2
