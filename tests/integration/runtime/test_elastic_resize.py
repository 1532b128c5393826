"""Resize mode on real processes (gloo): a replica is SIGKILLed, the survivors go on at world
size 3 without restarting, the replacement joins at a step boundary (4 -> 3 -> 4), every sample
is consumed once per epoch, and the run ends within tolerance of an uninterrupted one.

The test plays the controller (round.json via the controller's own publish_round).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from elastic_checks import consumed_per_epoch, lineage, replay, uninterrupted
from elastic_harness import Cluster

NODES = {"worker-0": "a", "worker-1": "a", "worker-2": "b", "worker-3": "b"}
SAMPLES, BATCH, EPOCHS = 240, 4, 24
ARGS = {"epochs": EPOCHS, "samples": SAMPLES, "batch": BATCH}
SURVIVORS = ["worker-0", "worker-1", "worker-3"]
# The stated tolerance (docs/benchmarks.md "Elastic"): after the same 24 epochs, the resized
# run's whole-data loss is within 15% of the uninterrupted run's. It saw the same samples, but
# some in 12-sample global batches (more, smaller steps): not the same trajectory. Replayed
# offline for 5 to 120 steps at world size 3 from step 20, the gap was -6% .. +2%.
LOSS_TOLERANCE = 0.15


def run_resize(tmp_path: Path) -> tuple[Cluster, float]:
    c = Cluster(tmp_path, NODES, mode="resize", min_world=2, args=ARGS)
    try:
        c.start()
        c.wait_for("step 20", lambda: c.max_step() >= 20)
        killed_at = c.kill("worker-2")
        c.publish(SURVIVORS, "shrink 4 -> 3: worker-2 exited 137 (SIGKILL)")
        # the controller restarts the replica after a back-off; the survivors train meanwhile
        c.wait_for("steps at world size 3",
                   lambda: sum(r["world"] == 3 for r in c.records("step")) >= 3 * 8)
        c.launch("worker-2")  # restart in place, same identity
        c.publish(list(NODES), "grow 3 -> 4: worker-2 is up")  # the process has started
        codes = c.wait_exit(240)
    finally:
        c.stop()
    assert codes == dict.fromkeys(NODES, 0), c.tails()
    return c, killed_at


def test_resize_survives_a_kill_and_grows_back_with_exactly_once_data(tmp_path: Path) -> None:
    c, killed_at = run_resize(tmp_path)
    enters = c.records("enter")
    for replica in SURVIVORS:  # kept alive: one process, re-entered for each round
        mine = [e for e in enters if e["replica"] == replica]
        assert len({e["pid"] for e in mine}) == 1
        # world sizes 4 -> 3 -> 4, one round each
        assert [(e["round"], e["world"]) for e in mine] == [(0, 4), (1, 3), (2, 4)]
    joined = [e for e in enters if e["replica"] == "worker-2" and e["world"] == 4
              and e["round"] == 2]
    assert len(joined) == 1 and joined[0]["source"] == "live"  # state from a peer, no storage
    grown_at = {e["restored"] for e in enters if e["round"] == 2 and e["world"] == 4}
    assert all(e["who"] == e["replica"] for e in enters)  # RankLocal values stay per rank
    assert len(grown_at) == 1  # every member continued from the same step

    steps = lineage(c.records("step"))
    worlds = [s.world for s in steps]
    runs = [w for i, w in enumerate(worlds) if i == 0 or worlds[i - 1] != w]
    assert runs == [4, 3, 4], runs

    # every epoch, the last included, saw every sample exactly once
    epochs = consumed_per_epoch(steps, SAMPLES, BATCH, incomplete_allowed=1)
    assert sorted(epochs) == list(range(EPOCHS))
    for epoch, seen in epochs.items():
        assert max(seen.values()) == 1, f"epoch {epoch}: a sample was consumed twice"
        assert sorted(seen) == list(range(SAMPLES)), f"epoch {epoch} missed samples"

    # bounded detection and rebuild: the survivors' next step at world size 3 came quickly
    after = min(r["t"] for r in c.records("step") if r["t"] > killed_at and r["world"] == 3)
    assert after - killed_at < 5.0

    done = {d["replica"]: d for d in c.records("done")}
    assert len({tuple(d["weights"]) for d in done.values()}) == 1  # members agree exactly
    weights, _ = replay(steps, SAMPLES, BATCH)
    final = done["worker-0"]
    assert max(abs(a - b) for a, b in zip(final["weights"], weights, strict=True)) < 1e-3
    _, baseline = replay(uninterrupted(EPOCHS * SAMPLES // (4 * BATCH), 4, SAMPLES, BATCH),
                         SAMPLES, BATCH)
    assert abs(final["loss"] - baseline) <= LOSS_TOLERANCE * baseline, (final["loss"], baseline)
    print(f"elastic loss {final['loss']:.4f} vs uninterrupted {baseline:.4f}; steps by world "
          f"size {dict(Counter(worlds))}; kill -> next step {after - killed_at:.3f}s")
