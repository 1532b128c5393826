"""`checkpoint.every: auto` on real processes: the controller measures the save cost the runtime
reports, publishes sqrt(2 x C x MTBF), and a script that only calls `maybe_save` follows it.

The MTBF prior is set to 2 s ($PERDURE_MTBF_PRIOR_SECONDS) so that the interval is short
enough to see within a few seconds of training; the default (a day) gives minutes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.helpers.harness import Perdure

HERE = Path(__file__).resolve().parent


@pytest.mark.timeout(180)
def test_auto_interval_is_measured_published_and_followed(
        perdure: Perdure, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_MTBF_PRIOR_SECONDS", "2")
    (perdure.root / "out").mkdir()
    spec = perdure.spec("auto", 2, ["python", str(HERE / "plain_job.py")],
                        env={"OUT": str(perdure.root / "out"), "STEPS": "160",
                             "STEP_TIME": "0.05"},
                        checkpoint={"dir": str(perdure.root / "ckpt"), "every": "auto"})
    cluster = perdure.cluster({"a": 2})
    r = perdure.cli("run", str(spec), "--cluster", str(cluster), timeout=150, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = perdure.describe("auto")
    published = [e["message"] for e in d["events"] if e["kind"] == "checkpoint"]
    assert re.match(r"checkpoint interval every 1\.\ds = Young/Daly\(C, MTBF\): C 1\.00s "
                    r"\(default: no save measured yet\), MTBF 2s", published[0]), published
    assert any("median of" in m for m in published), published  # C measured from real saves
    ci = d["watchdog"]["checkpoint_interval"]
    assert ci["changes"] == len(published) >= 2 and "median of" in ci["chosen"]
    interval = json.loads((perdure.state / "intervals" / f"{d['id']}.json").read_text())
    assert 0 < interval["cost"] < 1.0 and interval["cost_measured"] >= 1
    # the runtime saved on its own, at the published interval (the spec has no every_steps)
    saves = sum(json.loads(line)["kind"] == "checkpoint_save"
                for f in (perdure.state / "launches").glob(f"{d['id']}.*.worker-0.*")
                for line in (f / "progress.jsonl").read_text().splitlines())
    assert saves >= 3, saves
    text = perdure.cli("describe", "auto").stdout
    assert re.search(r"Checkpoint interval \(every: auto; \d+ published", text), text


def _restore_sources(state: Path, job_id: str) -> dict[str, list[str]]:
    """Each launch's reported restore sources, by launch id (the runtime's progress records)."""
    out: dict[str, list[str]] = {}
    for f in sorted((state / "launches").glob(f"{job_id}.*.worker-*.*")):
        lines = (f / "progress.jsonl").read_text().splitlines() if (
            f / "progress.jsonl").exists() else []
        out[f.name] = [rec["source"] for rec in map(json.loads, lines)
                       if rec["kind"] == "restore"]
    return out


@pytest.mark.local_long
@pytest.mark.timeout(300)
def test_restores_from_snapshots_are_reported_and_thin_the_failures(
        perdure: Perdure, monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/ddp_mlp with node-local snapshots and no checkpoint in the window: a replica
    SIGKILLed, the group restarts from the snapshot, every replica says so, and the
    controller's interval counts the failure as one the checkpoint did not have to recover."""
    from test_resume_harness import FaultyRun, Settings, write_spec

    monkeypatch.setenv("PERDURE_MTBF_PRIOR_SECONDS", "2")  # publishes as running time grows
    settings = Settings(epochs=8, replicas=2, every=10_000, snapshot_every=3, step_time=0.03)
    cluster = perdure.cluster({"a": 2})
    run = FaultyRun(perdure, "snap", settings, cluster)
    pools = [{"name": "worker", "replicas": 2, "memory_mb": 2048, "command": [
        "python", str(HERE.parents[2] / "examples" / "ddp_mlp" / "train.py"), "--epochs", "8",
        "--step-time", "0.03", "--snapshot-every", "3", "--checkpoint-every", "10000"]}]
    spec = write_spec(perdure, "snap", settings, pools=pools, checkpoint={
        "dir": str(run.ckpt), "every": "auto"})
    run.job_id = perdure.cli("submit", str(spec), "--cluster", str(cluster)).stdout.strip()
    run.start_controller()
    try:
        run.wait_training(10)
        run.kill_replica("worker-1")
        d = run.wait_state(lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=240)
    finally:
        run.close()
    assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-10:])
    sources = _restore_sources(perdure.state, run.job_id)
    first = {k: v for k, v in sources.items() if k.endswith(".1")}
    again = {k: v for k, v in sources.items() if not k.endswith(".1")}
    assert sorted(first) == [f"{run.job_id}.1.worker-{i}.1" for i in (0, 1)], sources
    assert list(first.values()) == [["scratch"]] * 2, sources  # nothing to restore yet
    # the group restart: both replicas agreed on the node-local snapshot, and said so
    assert sorted(again.values()) == [["snapshot-local"]] * 2, sources
    published = json.loads((perdure.state / "intervals" / f"{d['id']}.json").read_text())
    assert (published["restores"], published["from_checkpoint"]) == (2, 0), published
    assert published["share"] == pytest.approx(0.5)
    assert published["mtbf"] == pytest.approx(published["failure_mtbf"] / 0.5)
    assert published["cost_measured"] == 0  # snapshot copies are not persistent saves
    events = [e["message"] for e in d["events"] if e["kind"] == "checkpoint"]
    assert any("0 of 2 replica restores from the checkpoint" in m for m in events), events
