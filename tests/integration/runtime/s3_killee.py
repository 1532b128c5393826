"""A trainer that saves every step to s3:// until it is killed: `python s3_killee.py URL`.

Its state is a function of the step (a tensor filled with it), so whatever a restore finds can
be checked. It resumes from the newest complete checkpoint and prints each step it reaches.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

from perdure.runtime.checkpoint import Checkpointer, SavePolicy

ELEMENTS = 3 << 20  # 12 MiB of float32: a multipart upload, killed anywhere in it


def main() -> None:
    ckpt = Checkpointer(sys.argv[1], keep=3, policy=SavePolicy(every_steps=1))
    state = {"w": torch.zeros(ELEMENTS), "step": 0}
    start = ckpt.restore_latest(state) or 0
    assert state["step"] == start and bool((state["w"] == start).all()), "restored a mix"
    print(f"resumed {start}", flush=True)
    for step in range(start + 1, 1_000_000):
        state["w"].fill_(float(step))
        state["step"] = step
        ckpt.maybe_save(step, state)
        print(f"step {step}", flush=True)


if __name__ == "__main__":
    main()
