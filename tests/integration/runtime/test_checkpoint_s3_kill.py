"""A trainer saving to s3:// SIGKILLed at random moments (before, during and after uploads,
between a shard and its commit marker): what remains never loads as a partial checkpoint,
every restore is a complete one, and each new run resumes where the last complete save was."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tests.helpers.s3server import S3

from perdure.runtime.checkpoint import Checkpointer

KILLEE = Path(__file__).with_name("s3_killee.py")
pytestmark = pytest.mark.s3_long


def _run_and_kill(url: str, after_steps: float, log: Path) -> int:
    """Start the trainer, SIGKILL it `after_steps` step-times after it resumed; its start."""
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(KILLEE), url], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "resumed" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the trainer did not start"
            time.sleep(0.02)
        time.sleep(after_steps)
    finally:
        proc.kill()
        proc.wait()
    return int(log.read_text().split("resumed ", 1)[1].split()[0])


def test_kills_at_any_moment_never_leave_a_loadable_partial_checkpoint(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PERDURE_S3_PART_MB", "5")
    url = s3.url("killed")
    rng = random.Random(22)
    starts = []
    for run in range(6):
        starts.append(_run_and_kill(url, rng.uniform(0.2, 2.5), tmp_path / f"run-{run}.log"))
        state = {"w": torch.zeros(3 << 20), "step": -1}
        ckpt = Checkpointer(url, keep=None)
        step = ckpt.restore_latest(state)
        if step is None:
            continue
        assert state["step"] == step and bool((state["w"] == step).all())
        assert step in ckpt.steps() and step >= starts[-1]
    assert starts == sorted(starts) and starts[-1] > 0, starts  # each run went on
