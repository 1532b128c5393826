"""Saver for the SIGKILL test: import torch once, then fork a saver per stdin line.

Each line is "<checkpoint dir> <progress file>". The forked child restores the newest
checkpoint (exiting with status 3 if its values are not the ones saved at that step), then saves
step after step until it is killed, writing how many saves returned to the progress file. The
zygote prints the child's pid and reaps it before the next line.
"""

from __future__ import annotations

import os
import sys
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
from torch import nn

from perdure.runtime.checkpoint import Checkpointer

WORDS = 1 << 19  # a 2 MiB tensor: a save takes long enough to be killed inside


def fresh_state() -> dict[str, Any]:
    """A state whose values say nothing about any step."""
    return {
        "w": torch.zeros(WORDS),
        "model": nn.Linear(32, 32),
        "step": -1,
        "meta": {"note": "", "history": []},
    }


def fill(state: dict[str, Any], step: int) -> None:
    """Make every value of ``state`` a function of ``step``."""
    state["w"].copy_(torch.arange(WORDS, dtype=torch.float32) + step)
    with torch.no_grad():
        state["model"].weight.fill_(step)
        state["model"].bias.fill_(-step)
    state["step"] = step
    state["meta"] = {"note": f"step {step}", "history": list(range(step % 7))}


def matches(state: dict[str, Any], step: int) -> bool:
    """True when ``state`` holds exactly what ``fill(step)`` put there."""
    expected = fresh_state()
    fill(expected, step)
    return (
        torch.equal(state["w"], expected["w"])
        and torch.equal(state["model"].weight, expected["model"].weight)
        and torch.equal(state["model"].bias, expected["model"].bias)
        and state["step"] == step
        and state["meta"] == expected["meta"]
    )


def saver(directory: str, progress: str) -> None:
    ckpt = Checkpointer(directory, keep=2)
    state = fresh_state()
    start = ckpt.restore_latest(state)
    if start is not None and not matches(state, start):
        os._exit(3)
    step = start or 0
    saves = 0
    while True:
        step += 1
        fill(state, step)
        ckpt.save(step, state)  # waits for the previous save's commit
        saves += 1
        with open(progress, "w") as f:
            f.write(str(saves))


def main() -> None:
    for line in sys.stdin:
        directory, progress = line.split()
        pid = os.fork()
        if pid == 0:
            try:
                saver(directory, progress)
            finally:
                os._exit(4)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(status, flush=True)


if __name__ == "__main__":
    main()
