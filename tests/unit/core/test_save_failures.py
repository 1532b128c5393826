"""Checkpoint saves that fail for good while training goes on: an event for each, an alert
at the runtime's threshold, a note when saves work again (the core, on a simulated clock)."""

from __future__ import annotations

from tests.helpers.sim import Sim, spec

from perdure.backends.local.progress import ProgressReader
from perdure.core.events import ReplicaProgress
from perdure.core.states import JobState


def _failed(lid: str, now: float, n: int, step: int) -> ReplicaProgress:
    return ReplicaProgress(lid, step, now, failed_saves=n, alert_after=2,
                           save_error=f"step {step}: GaveUp (SlowDown): put ...")


def test_failed_saves_are_events_then_an_alert_then_a_recovery() -> None:
    sim = Sim(nodes={"a": 2})
    j = sim.submit(spec(name="saves"))
    sim.run_until(j, {JobState.RUNNING})
    lid = sim.job(j).replicas[0].launch_id or ""
    for n, step in ((1, 10), (2, 20), (3, 30)):
        sim.pending.append(_failed(lid, sim.now, n, step))
        sim.step()
    job = sim.job(j)
    assert (job.failed_saves, job.save_alert) == (3, True)
    assert job.save_error.startswith("step 30: GaveUp (SlowDown)")
    kinds = [(e.kind, e.message.split(":")[0]) for e in sim.events if e.job_id == j
             and e.kind.startswith("checkpoint")]
    assert kinds == [("checkpoint", "checkpoint save failed (1 in a row)"),
                     ("checkpoint", "checkpoint save failed (2 in a row)"),
                     ("checkpoint-alert", "ALERT"),
                     ("checkpoint", "checkpoint save failed (3 in a row)")]
    sim.pending.append(ReplicaProgress(lid, 40, sim.now, failed_saves=0))
    sim.step()
    job = sim.job(j)
    assert (job.failed_saves, job.save_alert, job.save_error) == (0, False, "")
    assert sim.messages(j)[-1] == ("checkpoint saves work again: step 40 committed after 3 "
                                   "failed save(s)")
    assert job.state is JobState.RUNNING  # never a failure of the job


def test_progress_records_of_failed_saves_are_summarised(tmp_path: object) -> None:
    from pathlib import Path

    d = Path(str(tmp_path))
    (d / "progress.jsonl").write_text(
        '{"kind": "steps", "t": 1, "t0": 0, "first": 1, "last": 9, "seconds": 0.9, "count": 9}\n'
        '{"kind": "checkpoint_failed", "t": 2, "step": 9, "consecutive": 2, "alert_after": 3, '
        '"error": "rank 0: GaveUp"}\n'
        '{"kind": "checkpoint_failed", "t": 3, "step": "x", "consecutive": "bad"}\n')
    got = ProgressReader().read("l1", str(d), 0.0)
    assert got is not None and got.failed_saves is None  # a malformed record says nothing
    (d / "progress.jsonl").write_text(
        '{"kind": "checkpoint_failed", "t": 2, "step": 9, "consecutive": 2, "alert_after": 3, '
        '"error": "rank 0: GaveUp"}\n')
    got = ProgressReader().read("l2", str(d), 0.0)
    assert got is not None
    assert (got.step, got.failed_saves, got.alert_after, got.save_error) == (
        9, 2, 3, "step 9: rank 0: GaveUp")
