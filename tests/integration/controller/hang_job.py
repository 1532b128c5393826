"""examples/ddp_mlp/train.py with one rank that hangs at one step of the job's first round.

HANG_RANK sleeps in `stuck_in_data_pipeline` before the forward pass of step HANG_STEP while
the other ranks wait in DDP's all-reduce; the restarted round (PERDURE_ROUND > 0) trains on
normally. Everything else is the example, so the weights must match an uninterrupted run.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "ddp_mlp"))
import train

HANG_STEP = int(os.environ["HANG_STEP"])
HANG_RANK = int(os.environ["HANG_RANK"])
_train_step = train.Run.train_step


def stuck_in_data_pipeline() -> None:
    time.sleep(3600)


def train_step(self: train.Run, batch: Any) -> float:
    first_round = os.environ.get("PERDURE_ROUND") == "0" and self.ctx.attempt == 1
    if first_round and self.ctx.rank == HANG_RANK and self.step + 1 == HANG_STEP:
        stuck_in_data_pipeline()
    return _train_step(self, batch)


train.Run.train_step = train_step  # type: ignore[method-assign]

if __name__ == "__main__":
    train.main()
