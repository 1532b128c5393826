"""examples/ddp_mlp/train.py, trained only as far as the test allows.

Before each step every rank waits while its step has reached the limit written in the file
$PACE (a step number; no file: no limit), so a test's faults land at the steps it chose and the
job cannot end before its last fault, however loaded the machine is. A preemption notice lifts
the limit for the rest of the launch: the ranks must train on to agree on the step to stop at.
Everything else is the example, so the weights must match an uninterrupted run.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "ddp_mlp"))
import train

PACE = Path(os.environ["PACE"])
_train_step = train.Run.train_step


def limit() -> int | None:
    """The step the test lets the ranks reach; None: no limit (the test writes it atomically)."""
    try:
        return int(PACE.read_text())
    except FileNotFoundError:
        return None


def train_step(self: train.Run, batch: Any) -> float:
    while not self.ctx.should_stop:
        at = limit()
        if at is None or self.step < at:
            break
        time.sleep(0.02)
    return _train_step(self, batch)


train.Run.train_step = train_step  # type: ignore[method-assign]

if __name__ == "__main__":
    train.main()
