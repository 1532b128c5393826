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

from conftest import Perdure

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
    assert published[0].startswith("checkpoint interval every 2.0s = sqrt(2 x C x MTBF): "
                                   "C 1.00s (default: no save measured yet), MTBF 2s"), published
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
