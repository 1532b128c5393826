"""examples/ddp_mlp/train.py with one rank slowed down at every step (a slow node in a
synchronous DDP job): THROTTLE_RANK spends THROTTLE seconds in `slow_preprocessing` before
each forward pass while the other ranks wait for it in DDP's all-reduce."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "ddp_mlp"))
import train

_train_step = train.Run.train_step


def slow_preprocessing() -> None:
    time.sleep(float(os.environ["THROTTLE"]))


def train_step(self: train.Run, batch: Any) -> float:
    if self.ctx.rank == int(os.environ["THROTTLE_RANK"]):
        slow_preprocessing()
    return _train_step(self, batch)


train.Run.train_step = train_step  # type: ignore[method-assign]

if __name__ == "__main__":
    train.main()
