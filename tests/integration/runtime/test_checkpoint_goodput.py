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
ckpt = Checkpointer(CKPT, keep=2)
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


def run(tmp: Path, n: int) -> list[dict[str, object]]:
    report = tmp / f"launch-{n}"
    report.mkdir()
    env = {**os.environ, "PERDURE_REPORT_DIR": str(report), "OMP_NUM_THREADS": "1"}
    code = f"CKPT = {str(tmp / 'ckpt')!r}\n" + SCRIPT
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    lines = (report / "progress.jsonl").read_text().splitlines()
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
