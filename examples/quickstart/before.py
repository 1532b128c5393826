"""A small DDP regression (torchrun: `torchrun --nproc-per-node 2 SCRIPT 3`)."""
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 3


def train_step(model, optim, x, y):
    loss = nn.functional.mse_loss(model(x), y)
    optim.zero_grad()
    loss.backward()
    optim.step()
    return loss.item()


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(1024, 8, generator=g), torch.randn(1024, 1, generator=g))
    sampler = DistributedSampler(data, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = DDP(nn.Linear(8, 1))
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            train_step(model, optim, x, y)
            step += 1
    print(f"rank {dist.get_rank()}: done at step {step}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
