"""A quarantined node, as the store keeps it and the API (the dashboard's nodes page) shows
it: QUARANTINED with its reason, no free slot; read back by a new Store (a controller
restart) with its strikes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from perdure.core.clusterspec import ClusterSpec
from perdure.core.records import Node, Strike
from perdure.serve import views
from perdure.serve.models import NodeOut
from perdure.store.sqlite import Store

REASON = "2 failures within 86400s: SIGSEGV of worker-1 (job-1); SIGSEGV of worker-0 (job-1)"


def test_a_quarantined_node_is_stored_and_shown_with_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "state" / "perdure.db"
    strikes = (Strike(10.0, "SIGSEGV", "job-1", "worker-1"),
               Strike(20.0, "SIGSEGV", "job-1", "worker-0"))
    Store(path).save_nodes([Node("a", 2), Node("b", 2, fence=REASON, strikes=strikes)])
    store = Store(path)  # as a restarted controller opens it
    b = store.nodes()["b"]
    assert (b.fence, b.strikes, b.schedulable) == (REASON, strikes, False)
    out = {n["name"]: NodeOut(**n) for n in views.nodes(store, ClusterSpec())}
    assert (out["b"].state, out["b"].reason, out["b"].free) == ("QUARANTINED", REASON, 0)
    assert (out["a"].state, out["a"].reason, out["a"].free) == ("READY", "", 2)
