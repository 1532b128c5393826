"""Pause mode and peer snapshots on real processes (gloo).

A replica is SIGKILLed while its snapshot is being replicated; the survivors stay alive and wait
for its replacement at the same world size; every rank restores the newest snapshot that all of
them hold: the survivors from their own memory, the replacement from its peer's memory, so the
half-sent snapshot is never used and no storage is read.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from elastic_checks import consumed_per_epoch, lineage, replay
from elastic_harness import Cluster

NODES = {"worker-0": "a", "worker-1": "a", "worker-2": "b"}
SAMPLES, BATCH, STEPS, EVERY = 240, 4, 100, 10
ARGS = {"steps": STEPS, "samples": SAMPLES, "batch": BATCH, "step_time": 0.02,
        "every": EVERY, "restore": "snapshot", "extra_mb": 16,
        "die_during_snapshot": ["worker-1", 30]}


@pytest.mark.parametrize("transport", ["file", "net"])
def test_pause_restores_from_peer_memory_after_a_kill_during_a_snapshot(tmp_path: Path,
                                                                         transport: str) -> None:
    """Over net, survivors re-form the group in the relay's store (no replica holds it) and
    the replacement finds its peer's holder through the relay."""
    c = Cluster(tmp_path, NODES, mode="pause", min_world=2, args=ARGS, transport=transport)
    try:
        c.start()
        c.wait_for("worker-1 to die", lambda: c.procs["worker-1"].poll() is not None)
        c.publish(list(NODES), "pause at world size 3: worker-1 exited; waiting for worker-1")
        time.sleep(0.5)  # the controller relaunches after its restart back-off
        c.launch("worker-1")
        codes = c.wait_exit(240)
    finally:
        c.stop()
    assert codes == dict.fromkeys(NODES, 0), c.tails()
    if transport == "net":  # the replicas opened no file of the state dir: the relay wrote them
        rdzv = c.state_dir / "rdzv" / "job-elastic"
        assert list((rdzv / "kv").glob("store-*.jsonl")) and not list(rdzv.glob("store-*"))
        assert (rdzv / "holders" / "worker-2.json").exists()

    dying = c.records("dying")
    assert len(dying) == 1 and dying[0]["step"] == 30 and dying[0]["in_flight"]
    enters = c.records("enter")
    for replica in ("worker-0", "worker-2"):  # kept alive, re-entered at the same world size
        mine = [e for e in enters if e["replica"] == replica]
        assert len({e["pid"] for e in mine}) == 1
        assert [(e["round"], e["world"]) for e in mine] == [(0, 3), (1, 3)]
    after = [e for e in enters if e["round"] == 1]
    # the half-replicated step-30 snapshot is not used: everyone agrees on step 20
    assert sorted((e["replica"], e["restored"]) for e in after) == [
        ("worker-0", 20), ("worker-1", 20), ("worker-2", 20)]
    assert all(e["who"] == e["replica"] for e in enters)  # each restored its own snapshot
    sources = {e["replica"]: e["source"] for e in after}
    assert sources["worker-0"] == sources["worker-2"] == "memory"
    # worker-1's copy lives on the next replica on another node
    assert sources["worker-1"] == "peer:worker-2"

    steps = lineage(c.records("step"))
    assert len(steps) == STEPS and {s.world for s in steps} == {3}
    epochs = consumed_per_epoch(steps, SAMPLES, BATCH, incomplete_allowed=1)
    for epoch, seen in epochs.items():
        assert max(seen.values()) == 1, f"epoch {epoch}: a sample was consumed twice"
        if epoch != max(epochs):
            assert sorted(seen) == list(range(SAMPLES)), f"epoch {epoch} missed samples"

    done = {d["replica"]: d for d in c.records("done")}
    assert len({tuple(d["weights"]) for d in done.values()}) == 1
    weights, _ = replay(steps, SAMPLES, BATCH)
    assert max(abs(a - b) for a, b in zip(done["worker-1"]["weights"], weights,
                                          strict=True)) < 1e-3
