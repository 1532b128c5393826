"""SIGKILL at random moments of saving never costs the previous checkpoint."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from ckpt_killee import fresh_state, matches

from perdure.runtime.checkpoint import Checkpointer

KILLEE = Path(__file__).with_name("ckpt_killee.py")
KILLS = 16


def wait_for_saves(progress: Path, count: int, timeout: float = 60.0) -> None:
    """Until the saver reports ``count`` saves returned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if int(progress.read_text() or 0) >= count:
                return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.005)
    raise AssertionError(f"the saver did not report {count} saves in {timeout}s")


def test_random_sigkills_leave_the_latest_complete_checkpoint_loadable(tmp_path: Path) -> None:
    rng = random.Random(1234)
    directory = tmp_path / "ckpt"
    zygote = subprocess.Popen(
        [sys.executable, str(KILLEE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    restored: list[int] = []
    partial_seen: set[str] = set()
    try:
        for n in range(KILLS):
            progress = tmp_path / f"progress-{n}"
            zygote.stdin.write(f"{directory} {progress}\n")
            zygote.stdin.flush()
            pid = int(zygote.stdout.readline())
            # Two saves returned: the first is committed (a save waits for the one before).
            # Then kill at a random moment of the saves that follow.
            wait_for_saves(progress, 2)
            time.sleep(rng.uniform(0.0, 0.3))
            os.kill(pid, signal.SIGKILL)
            status = int(zygote.stdout.readline())
            # the saver was killed, not failed: its own restore check (exit 3) passed
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status

            ckpt = Checkpointer(directory, keep=2)
            state = fresh_state()
            step = ckpt.restore_latest(state)
            partial_seen.update(ckpt.skipped_partial)
            assert step is not None, "no complete checkpoint after a committed save"
            assert matches(state, step), f"restored step {step} holds other values"
            assert not restored or step > restored[-1], f"no progress: {restored}, {step}"
            assert step in ckpt.steps()
            restored.append(step)
    finally:
        zygote.stdin.close()
        zygote.wait(timeout=30)

    # Kills landed inside saves, and restore named what it skipped.
    assert any("skipped partial checkpoint step-" in p for p in partial_seen), partial_seen
