"""`checkpoint.every: auto` counts only the failures the persistent checkpoint had to recover:
the replicas say where each restore came from, the controller thins the failures by the share
that reached the checkpoint, and the reader of their records carries the words through."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from perdure.backends.local.progress import ProgressReader
from perdure.controller.intervals import IntervalShell
from perdure.core import interval as iv
from perdure.core.events import ReplicaProgress
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec
from perdure.core.states import JobState


@pytest.mark.parametrize(("source", "reached"), [
    ("checkpoint", True), ("snapshot-local", False), ("snapshot-peer", False),
    ("snapshot-memory", False), ("scratch", None), ("", None), ("tape", None), (None, None)])
def test_which_restores_reached_the_checkpoint(source: object, reached: bool | None) -> None:
    assert iv.reached_checkpoint(source) is reached


def _record(replicas: int, restores: dict[str, int]) -> iv.JobRecord:
    rec = iv.JobRecord(failures=10, seconds=3000.0, replicas=replicas)
    iv.note_cost(rec, 2.0)
    for source, n in restores.items():
        for _ in range(n):
            iv.note_restore(rec, source)
    return rec


def test_without_restore_sources_every_failure_counts() -> None:
    cluster = iv.Cluster(failures=10, seconds=3000.0)
    plain = iv.choose(iv.JobRecord(failures=10, seconds=3000.0, costs=[2.0]), cluster, 1e9)
    # a job whose replicas restore from scratch (no checkpoint, no snapshot) says nothing
    scratch = iv.choose(_record(4, {"scratch": 40}), cluster, 1e9)
    assert plain.share == scratch.share == 1.0
    assert plain.mtbf == plain.failure_mtbf == scratch.mtbf
    assert "replica restores" not in plain.explain()


def test_failures_that_snapshots_absorb_lengthen_the_checkpoint_interval() -> None:
    cluster = iv.Cluster(failures=10, seconds=3000.0)
    every = iv.choose(_record(4, {"checkpoint": 40}), cluster, 1e9)
    assert every.share == 1.0  # the prior and every restore: the checkpoint
    # 4 replicas, 10 group restarts: 40 replica restores, one restart (4) from the checkpoint
    mixed = iv.choose(_record(4, {"snapshot-local": 30, "snapshot-peer": 6, "checkpoint": 4,
                                  "scratch": 4}), cluster, 1e9)
    assert (mixed.restores, mixed.from_checkpoint) == (40, 4)
    assert mixed.share == pytest.approx((4 + 4) / (4 + 40))
    assert mixed.failure_mtbf == every.mtbf
    assert mixed.mtbf == pytest.approx(every.mtbf / mixed.share)
    assert mixed.seconds == pytest.approx(iv.young_daly(2.0, mixed.mtbf, 1e9))
    assert mixed.seconds > 2 * every.seconds  # sqrt(1 / share) = 2.3x longer
    assert "4 of 40 replica restores from the checkpoint" in mixed.explain()
    assert mixed.to_json()["share"] == mixed.share


def test_the_prior_is_one_whole_job_recovery_from_the_checkpoint() -> None:
    # one group restart of 8 replicas from snapshots halves the share, as one failure would
    rec = _record(8, {"snapshot-local": 8})
    assert iv.checkpoint_share(rec) == pytest.approx(0.5)
    assert iv.checkpoint_share(_record(1, {"snapshot-local": 1})) == pytest.approx(0.5)
    # the share never reaches zero: the interval stays finite below the ceiling
    many = _record(1, {"snapshot-peer": 10_000})
    chosen = iv.choose(many, iv.Cluster(), 1e12)
    assert chosen.share > 0 and math.isfinite(chosen.seconds)


def test_the_reader_carries_restore_sources_and_leaves_snapshot_copies_out_of_save_costs(
        tmp_path: Path) -> None:
    lines = [{"kind": "restore", "t": 1, "step": 30, "seconds": 0.2, "source": "snapshot-local"},
             {"kind": "checkpoint_save", "t": 2, "step": 33, "seconds": 0.01, "what": "snapshot"},
             {"kind": "steps", "t": 3, "t0": 2, "first": 31, "last": 40, "seconds": 1, "count": 10}]
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = ProgressReader().read("job.0.worker-0.1", str(tmp_path), 0.0)
    assert got is not None
    assert (got.step, got.restores, got.save_seconds) == (40, ("snapshot-local",), None)
    with (tmp_path / "progress.jsonl").open("a") as f:
        f.write(json.dumps({"kind": "checkpoint_save", "t": 4, "step": 40, "seconds": 0.5}) + "\n")
    later = ProgressReader()
    got = later.read("job.0.worker-0.1", str(tmp_path), 0.0)
    assert got is not None and got.save_seconds == 0.5 and got.restores == ("snapshot-local",)


def test_the_controller_feeds_only_reported_sources_into_the_interval(tmp_path: Path) -> None:
    spec = JobSpec.model_validate({"name": "j", "checkpoint": {"every": "auto"}, "pools": [
        {"name": "worker", "replicas": 2, "command": ["python", "t.py"]}]})
    job = Job("j-1", spec, str(tmp_path), 0.0, replicas=make_replicas(spec))
    job.state = JobState.RUNNING
    shell = IntervalShell(str(tmp_path))
    shell.step({"j-1": job}, [], 0.0)
    obs = [ReplicaProgress("j-1.0.worker-0.2", 5, 1.0, restores=("snapshot-local",)),
           ReplicaProgress("j-1.0.worker-1.2", 5, 1.0, restores=("snapshot-peer",)),
           ReplicaProgress("j-1.0.worker-1.3", 5, 1.0, restores=("scratch",)),
           ReplicaProgress("other-1.0.worker-0.1", 5, 1.0, restores=("checkpoint",))]
    events = shell.step({"j-1": job}, obs, 2.0)
    rec = shell.records["j-1"]
    assert (rec.replicas, rec.restores, rec.from_checkpoint) == (2, 2, 0)
    assert not (tmp_path / "intervals").exists()  # published after the tick commits
    shell.publish()
    published = json.loads((tmp_path / "intervals" / "j-1.json").read_text())
    assert published["share"] == pytest.approx(0.5) and published["restores"] == 2
    assert any("2 replica restores" in e.message for e in events), events


def test_the_runtime_writes_the_words_the_core_reads() -> None:
    from perdure.runtime import goodput

    assert (goodput.FROM_CHECKPOINT, goodput.FROM_SCRATCH) == (iv.CHECKPOINT, iv.SCRATCH)
    assert (goodput.FROM_NODE_SNAPSHOT, goodput.FROM_PEER_SNAPSHOT,
            goodput.FROM_OWN_SNAPSHOT) == iv.SNAPSHOT_SOURCES
