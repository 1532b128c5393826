"""A DDP training script with no preemption code at all: it only calls `ckpt.maybe_save`.

Every step depends on the last (SGD with momentum, data drawn from a generator seeded by the
step), so a resume from anything but the exact saved state ends with other weights. Rank 0
writes the final weights' SHA-256 to $OUT/result.json. With SEGV_ON_NODE=b, a replica that
runs on node b dies of SIGSEGV 3 steps after it started (a bad machine: test_node_health).
With HOLD_AT=N, every rank waits before step N+1 until $OUT/go exists (so a test can act on
a run at a known step however loaded the machine is).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import perdure
from perdure.runtime import Checkpointer, goodput

STEPS = int(os.environ.get("STEPS", "60"))
STEP_TIME = float(os.environ.get("STEP_TIME", "0.05"))
BAD_NODE = os.environ.get("SEGV_ON_NODE")
HOLD_AT = int(os.environ.get("HOLD_AT", "-1"))

ctx = perdure.init(seed=0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
ddp = DDP(model) if ctx.world_size > 1 else model
optim = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
ckpt = Checkpointer(keep=2)  # the spec's checkpoint settings; maybe_save does the rest
state = {"model": model, "optim": optim}
step = ckpt.restore_latest(state) or 0
print(f"rank {ctx.rank} attempt {ctx.attempt}: resumed at step {step}", flush=True)
crash_at = step + 3 if BAD_NODE and os.environ.get("PERDURE_NODE") == BAD_NODE else None
while step < STEPS:
    if step == crash_at:
        os.kill(os.getpid(), signal.SIGSEGV)
    while step == HOLD_AT and not (Path(os.environ["OUT"]) / "go").exists():
        time.sleep(0.05)
    with goodput.step(step + 1):
        g = torch.Generator().manual_seed(1000 * step + ctx.rank)
        x = torch.randn(4, 8, generator=g)
        loss = (ddp(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
        step += 1
        time.sleep(STEP_TIME)
    ckpt.maybe_save(step, state)
ckpt.wait()
if ctx.rank == 0:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode() + t.detach().numpy().tobytes())
    out = Path(os.environ["OUT"])
    (out / "result.json").write_text(json.dumps({"sha256": h.hexdigest(), "steps": step}))
ctx.finish(0)
