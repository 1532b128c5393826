"""Ends right after gloo collectives whose handles it dropped: gloo's worker threads hold the
last references and free them while the interpreter exits (see perdure.runtime.exitguard).
GUARD=1: perdure.init() too (one rank: it leaves the group as it is and installs the guard).
DESTROY=1: end with the script's own destroy_process_group (the same race can hang there)."""

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
if os.environ.get("DESTROY") == "1":
    print("guarded destroy:", getattr(dist.destroy_process_group, "_perdure_settles", False))
    dist.destroy_process_group()
