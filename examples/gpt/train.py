"""A small GPT trained with FSDP2 (`fully_shard`) on gloo under perdure, resuming exactly.

    perdure run examples/gpt/job.yaml        # 2 replicas here; any number elsewhere

Tokens come from shards on "slow" storage through perdure's local cache (data.py). The
checkpoint (perdure's Checkpointer: async, one shard per rank, atomic) holds the sharded model
and optimizer, the step, the data position (ElasticSampler: a global cursor) and each rank's
RNG; restored onto the same number of replicas the run is bit-identical to an uninterrupted
one, onto another number it is resharded and every remaining sample of the epoch is trained
on once. Preemption notices are agreed by StopVote; steps reach goodput.

At the end rank 0 writes `result.json` into `--out` (default: the checkpoint dir): the SHA-256
of the full weights, the steps, and the world size.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

import perdure
from perdure.runtime import Checkpointer, ElasticLoader, ElasticSampler, StopVote, goodput
from perdure.runtime.checkpoint import RankLocal, SavePolicy
from perdure.runtime.rng import derive_seed, rng_state, seed_everything, set_rng_state

HERE = Path(__file__).resolve().parent
try:  # run as a script (`python train.py`) or imported (bench/, tests)
    from data import TokenWindows, prepare
    from model import GPT, GPTConfig, parameters
except ImportError:  # pragma: no cover
    from examples.gpt.data import TokenWindows, prepare
    from examples.gpt.model import GPT, GPTConfig, parameters


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env_every = os.environ.get("PERDURE_CHECKPOINT_EVERY")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--per-shard", type=int, default=64, help="sequences per shard")
    p.add_argument("--data", default=None, help="the shards' directory (default: ./data)")
    p.add_argument("--cache", default=None, help="the local cache (default: $PERDURE_NODE_DIR"
                   " or ./cache)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-dir", default=os.environ.get("PERDURE_CHECKPOINT_DIR"))
    p.add_argument("--checkpoint-every", type=int, default=int(env_every or 50))
    p.add_argument("--out", default=None)
    p.add_argument("--step-file", default=None, help="rank 0 appends each finished step here")
    p.add_argument("--timeline", default=None,
                   help="rank 0 appends a JSON line per step (pid, step, wall time, step "
                        "seconds, CPU times): what bench/overhead.py and bench/recovery.py "
                        "measure")
    p.add_argument("--bare", action="store_true",
                   help="no perdure at all (no checkpoints, vote, goodput): bench/overhead.py's "
                        "baseline")
    return p.parse_args(argv)


def shard(model: torch.nn.Module, world: int) -> torch.nn.Module:
    """FSDP2: each block its own unit, then the rest (embeddings, head)."""
    if world > 1:
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:  # type: ignore[union-attr]
            fully_shard(block)
        fully_shard(model)
    return model


def weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of the full (unsharded) weights; a collective, complete on rank 0."""
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))
    h = hashlib.sha256()
    for name, t in sorted(full.items()):
        h.update(name.encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


class Run:
    def __init__(self, a: argparse.Namespace, rank: int, world: int) -> None:
        self.a, self.rank, self.world = a, rank, world
        data_dir = Path(a.data or "data")
        if rank == 0:
            prepare(data_dir, a.shards, a.per_shard, a.seq, a.vocab)
        if world > 1:
            dist.barrier()
        cache = Path(a.cache or os.environ.get("PERDURE_NODE_DIR") or "cache") / "gpt-cache"
        self.data = TokenWindows(data_dir, cache, a.per_shard, a.seq)
        self.sampler = ElasticSampler(len(self.data), a.batch, seed=a.seed, drop_last=True)
        self.loader = ElasticLoader(self.data, self.sampler)
        config = GPTConfig(vocab=a.vocab, seq=a.seq, dim=a.dim, layers=a.layers, heads=a.heads)
        torch.manual_seed(a.seed)  # the same initial weights on every rank
        self.model = shard(GPT(config), world)
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=3e-4, weight_decay=0.1)
        seed_everything(derive_seed(a.seed, rank) % 2**63)  # per-rank dropout masks
        self.step = 0
        self.ckpt = None if a.bare or not a.checkpoint_dir else Checkpointer(
            a.checkpoint_dir, keep=2, policy=SavePolicy(every_steps=a.checkpoint_every))
        self.vote = None if a.bare else StopVote(within=0.5)
        self.params = parameters(self.model)

    def state(self) -> dict[str, Any]:
        return {"model": self.model, "optim": self.optim, "data": self.loader,
                "step": self.step, "rng": RankLocal(rng_state())}

    def restore(self) -> None:
        if self.ckpt is None:
            return
        began = time.perf_counter()
        state = self.state()
        if self.ckpt.restore_latest(state) is not None:
            self.step = int(state["step"])
            set_rng_state(state["rng"].value)
        goodput.checkpoint_restored(self.step or None, time.perf_counter() - began)
        if self.rank == 0:
            print(f"start at step {self.step} on {self.world} replicas "
                  f"({self.params / 1e6:.1f} M parameters)", flush=True)

    def batches(self) -> Any:
        while True:
            yield from self.loader
            self.loader.set_epoch(self.loader.epoch + 1)

    def train_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        loss = self.model(*batch)
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        return float(loss.detach())

    def train(self, ctx: perdure.Context | None) -> None:
        stream = self.batches()
        while self.step < self.a.steps:
            began = time.perf_counter()
            if self.vote is None:
                loss = self.train_step(next(stream))
                self.step += 1
                stop = False
            else:
                with goodput.step(self.step + 1):
                    loss = self.train_step(next(stream))
                    self.step += 1
                    stop = self.vote.poll(ctx is not None and ctx.should_stop)
            self.after_step(loss, stop, ctx, time.perf_counter() - began)

    def after_step(self, loss: float, stop: bool, ctx: perdure.Context | None,
                   seconds: float) -> None:
        if self.rank == 0 and self.a.step_file:
            with open(self.a.step_file, "a") as f:
                f.write(f"{self.step}\n")
        if self.rank == 0 and self.a.timeline:
            with open(self.a.timeline, "a") as f:
                f.write(json.dumps({"pid": os.getpid(), "step": self.step, "t": time.time(),
                                    "s": seconds, "cpu": time.process_time(),
                                    "main": time.thread_time()}) + "\n")
        if self.rank == 0 and self.step % 10 == 0:
            print(f"step {self.step} loss {loss:.4f}", flush=True)
        if self.ckpt is None:
            return
        if stop:
            self.ckpt.save(self.step, self.state(), blocking=True)
            print(f"notice: saved step {self.step}; exiting suspended", flush=True)
            assert ctx is not None
            ctx.exit_suspended()
        self.ckpt.maybe_save(self.step, self.state())

    def finish(self, ctx: perdure.Context | None) -> None:
        if self.vote is not None:
            self.vote.close()
        if self.ckpt is not None:
            self.ckpt.wait()
        digest = weights_sha256(self.model)
        if self.rank == 0:
            out = Path(self.a.out or self.a.checkpoint_dir or ".")
            out.mkdir(parents=True, exist_ok=True)
            tmp = out / f".result.json.{os.getpid()}"
            tmp.write_text(json.dumps({"sha256": digest, "steps": self.step,
                                       "world_size": self.world}))
            os.replace(tmp, out / "result.json")
            print(f"done: final weights sha256 {digest}", flush=True)


def main() -> None:
    a = parse_args()
    if a.bare:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            dist.init_process_group("gloo")
        ctx = None
        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() \
            else (0, 1)
    else:
        ctx = perdure.init(seed=a.seed)
        rank, world = ctx.rank, ctx.world_size
    run = Run(a, rank, world)
    run.restore()
    run.train(ctx)
    run.finish(ctx)
    if ctx is not None:
        goodput.flush()
        ctx.finish(0)
    elif dist.is_initialized():
        # exit at once after the teardown: gloo's at interpreter exit can abort or hang
        dist.destroy_process_group()
        os._exit(0)


if __name__ == "__main__":
    main()
