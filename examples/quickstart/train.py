"""A small DDP regression (torchrun: `torchrun --nproc-per-node 2 SCRIPT 3`)."""
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import TensorDataset

import perdure
from perdure.runtime import Checkpointer, ElasticLoader, ElasticSampler, goodput

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 3


def train_step(model, optim, x, y):
    loss = nn.functional.mse_loss(model(x), y)
    optim.zero_grad()
    loss.backward()
    optim.step()
    return loss.item()


def main():
    ctx = perdure.init()  # the process group, error reports, preemption notices
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(1024, 8, generator=g), torch.randn(1024, 1, generator=g))
    loader = ElasticLoader(data, ElasticSampler(len(data), 16, seed=0))  # resumes mid-epoch
    model = DDP(nn.Linear(8, 1))
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    ckpt = Checkpointer(ctx.checkpoint_dir)  # async, sharded; `checkpoint:` in the spec
    state = {"model": model, "optim": optim, "data": loader, "step": 0}
    step = ckpt.restore_latest(state) or 0  # loads model, optimizer and data position
    print(f"rank {ctx.rank}: starting at step {step}")
    while loader.epoch < EPOCHS:
        for x, y in loader:
            with goodput.step(step + 1):  # productive time, for `perdure describe`
                train_step(model, optim, x, y)
            step += 1
            ckpt.maybe_save(step, {**state, "step": step})  # on a notice: save, exit, resume
        loader.set_epoch(loader.epoch + 1)
    print(f"rank {dist.get_rank()}: done at step {step}")
    ckpt.wait()
    ctx.finish()


if __name__ == "__main__":
    main()
