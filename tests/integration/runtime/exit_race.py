"""Ends right after gloo collectives whose handles it dropped: gloo's worker threads hold the
last references and free them while the interpreter exits (see perdure.runtime.exitguard).
GUARD=1: perdure.init() too (one rank: it leaves the group as it is and installs the guard)."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if os.environ.get("GUARD") == "1":
    import perdure

    perdure.init()
tensors = [torch.ones(4) for _ in range(64)]
for t in tensors:
    dist.broadcast(t, 0, async_op=True)
