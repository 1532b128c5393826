"""Independent replicas (no process group), each saving its own checkpoints with maybe_save;
one step takes SLOW_STEP seconds on node $SLOW_NODE and FAST_STEP elsewhere: a slow node."""

from __future__ import annotations

import os
import time

import torch

import perdure
from perdure.runtime import Checkpointer, goodput

ctx = perdure.init(distributed=False)
steps = int(os.environ["STEPS_" + ctx.replica.replace("-", "_")])
slow = os.environ.get("PERDURE_NODE") == os.environ["SLOW_NODE"]
pause = float(os.environ["SLOW_STEP"] if slow else os.environ["FAST_STEP"])
ckpt = Checkpointer(os.path.join(os.environ["PERDURE_CHECKPOINT_DIR"], ctx.replica), keep=1)
state = {"w": torch.zeros(4)}
step = ckpt.restore_latest(state) or 0
print(f"{ctx.replica} on {os.environ.get('PERDURE_NODE')}: resumed at step {step}", flush=True)
while step < steps:
    with goodput.step(step + 1):
        state["w"] += 1
        time.sleep(pause)
        step += 1
    ckpt.maybe_save(step, state)
ckpt.wait()
goodput.flush()
ctx.finish(0)
