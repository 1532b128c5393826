"""An elastic DDP job (gloo): it keeps training when replicas are lost, and grows back.

Run it under perdure with its elastic spec (`perdure run examples/elastic_mlp/job.yaml
--cluster examples/elastic_mlp/cluster.yaml`), then take a node away and give it back
(`perdure chaos fail-node a`, `perdure node restore a`): the survivors are never restarted,
they go on as a smaller group, and the replacements join at a step boundary with the state
of a survivor. Every sample is still seen once per epoch. `demo.py` does all of that.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import perdure
from perdure.runtime import (
    Checkpointer,
    ElasticSampler,
    Snapshotter,
    elastic,
    goodput,
    rng_state,
    set_rng_state,
)
from perdure.runtime.checkpoint import RankLocal


class Generators:
    """Every random generator of this process, as a state value (per rank: see RankLocal)."""

    def state_dict(self) -> dict[str, Any]:
        return rng_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_rng_state(state)


def make_data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 32, generator=g)
    w = torch.randn(32, 1, generator=g)
    return x, x @ w + 0.1 * torch.randn(n, 1, generator=g)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=16, help="samples per replica per step")
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--snapshot-every", type=int, default=50)
    p.add_argument("--checkpoint-every", type=int, default=200)
    p.add_argument("--step-time", type=float, default=0.0,
                   help="extra seconds of (simulated) compute per step")
    args = p.parse_args()

    ctx = perdure.init(seed=0, distributed=False)  # the Manager builds the process group
    manager = elastic.Manager()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = make_data(args.samples)
    sampler = ElasticSampler(len(x), args.batch, seed=0)
    # what moves between replicas: weights, optimizer, step, and the data position after the
    # last completed step (the sampler's own cursor also counts a batch of a failed step)
    state: dict[str, Any] = {"model": model, "optim": opt, "step": 0,
                             "data": sampler.state_dict(),
                             "rng": RankLocal(Generators())}  # snapshotted, never broadcast
    snap = Snapshotter()

    @manager.elastic_retry()  # resize or pause, and the minimum, come from the spec
    def train() -> None:
        ckpt = Checkpointer(ctx.checkpoint_dir, keep=2, async_save=False) \
            if ctx.checkpoint_dir else None  # a new one per group: it has its own groups
        restore(manager, snap, ckpt, state)
        sampler.load_state_dict(state["data"])  # re-partition on this group's world size
        sampler.set_world(manager.rank, manager.world_size)
        ddp = DDP(model) if manager.world_size > 1 else model  # re-wrap: the group is new
        print(f"{manager.replica} round {manager.round}: rank {manager.rank} of "
              f"{manager.world_size} from step {state['step']}", flush=True)
        while state["step"] < args.steps:
            if sampler.cursor >= sampler.num_samples:
                sampler.set_epoch(sampler.epoch + 1)
            for indices in sampler:
                with goodput.step(state["step"]):
                    loss = ((ddp(x[indices]) - y[indices]) ** 2).sum() / args.batch
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    if args.step_time:
                        time.sleep(args.step_time)  # stands in for a bigger model's compute
                state["step"] += 1
                state["data"] = sampler.state_dict()
                step = state["step"]
                if step % 50 == 0 or step == args.steps:
                    print(f"step {step} world {manager.world_size} loss {loss.item():.4f}",
                          flush=True)
                if step % args.snapshot_every == 0:
                    snap.save(step, state)  # host memory + a peer's, in the background
                if ckpt is not None and step % args.checkpoint_every == 0:
                    ckpt.save(step, state)
                if step >= args.steps:
                    return
                manager.maybe_reconfigure()  # grow back here when replicas are ready

    train()
    print("done", flush=True)
    snap.close()
    manager.close()
    ctx.finish(0)


def restore(manager: elastic.Manager, snap: Snapshotter, ckpt: Checkpointer | None,
            state: dict[str, Any]) -> None:
    """After (re)joining: a survivor's live state; else peer snapshots; else the checkpoint."""
    if manager.sync_state(state) is not None:
        return  # survivors kept their state; new members got it from the furthest one
    source = "scratch"
    if snap.load(state) is not None:  # reports itself, with where it came from
        source = "peer snapshot"
    elif ckpt is not None and ckpt.restore_latest(state) is not None:  # reports itself
        source = "checkpoint"
    print(f"{manager.replica}: state from {source} at step {state['step']}", flush=True)


if __name__ == "__main__":
    main()
