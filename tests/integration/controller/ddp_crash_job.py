"""An unmodified DDP script (no perdure import) that raises where the test says.

    python ddp_crash_job.py before-init | after-init | loader-worker
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

where = sys.argv[1]
rank = int(os.environ["RANK"])


class Samples(Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == 5:
            raise KeyError(f"sample {i} is corrupt")
        return torch.tensor([float(i)])


if where == "before-init":
    raise ValueError("bad config: lr must be positive")
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))
print(f"rank {rank} of {dist.get_world_size()} ready", flush=True)
if where == "after-init":
    raise ValueError("bad shape: expected 8, got 7")
if where == "loader-worker":
    for batch in DataLoader(Samples(), batch_size=1, num_workers=2):
        model(batch).sum().backward()
dist.barrier()
dist.destroy_process_group()
