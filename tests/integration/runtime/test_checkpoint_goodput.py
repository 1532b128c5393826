"""Checkpointer.save and restore_latest report to goodput by themselves (issue 19): a script
that only calls them (the README's snippet) shows its saves, restores and wasted progress."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import torch
from torch import nn
from perdure.runtime import Checkpointer, goodput

model = nn.Linear(4, 2)
ckpt = Checkpointer(CKPT, keep=2, report_times=REPORT)
state = {"model": model}
step = ckpt.restore_latest(state) or 0
for step in range(step + 1, step + 6):
    with goodput.step(step):
        model.weight.data += 1
    if step % 2 == 0:
        ckpt.save(step, state)
ckpt.save(step, state, blocking=True)
ckpt.wait()
"""


def run(tmp: Path, n: int, report: bool = True) -> list[dict[str, object]]:
    where = tmp / f"launch-{n}"
    where.mkdir()
    env = {**os.environ, "PERDURE_REPORT_DIR": str(where), "OMP_NUM_THREADS": "1"}
    code = f"CKPT = {str(tmp / 'ckpt')!r}\nREPORT = {report}\n" + SCRIPT
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    lines = (where / "progress.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_save_and_restore_latest_report_to_goodput(tmp_path: Path) -> None:
    first = run(tmp_path, 1)
    assert [r["step"] for r in first if r["kind"] == "restore"] == [None]  # from scratch
    saves = [r for r in first if r["kind"] == "checkpoint_save"]
    assert [r["step"] for r in saves] == [2, 4, 5]
    assert all(float(r["seconds"]) >= 0 for r in saves)
    second = run(tmp_path, 2)
    restores = [r for r in second if r["kind"] == "restore"]
    assert [r["step"] for r in restores] == [5] and float(restores[0]["seconds"]) > 0


def test_a_caller_that_times_saves_itself_gets_no_second_record(tmp_path: Path) -> None:
    # report_times=False: PerdureTrainer's callback reports each save and resume over a span
    # that holds the Checkpointer's; two records would count that time twice.
    first = run(tmp_path, 1, report=False)
    assert [r for r in first if r["kind"] in ("restore", "checkpoint_save")] == []
    assert [r for r in first if r["kind"] == "steps"]  # progress is reported as before
    second = run(tmp_path, 2, report=False)
    assert [r for r in second if r["kind"] in ("restore", "checkpoint_save")] == []
