"""A DDP (gloo) job that survives kills and preemptions and resumes bit-identically.

Run it under perdure (`perdure run examples/ddp_mlp/job.yaml`) or by hand with torchrun; it
reads the torchrun environment through `perdure.init()`.

What makes a resumed run end with the same weights as an uninterrupted one:
- every `--checkpoint-every` steps ($PERDURE_CHECKPOINT_EVERY, from the spec's
  `checkpoint.every_steps`) it saves, asynchronously, the model, the optimizer, the step, the
  data position (ElasticLoader: a global cursor into an order that is a pure function of seed
  and epoch), each rank's RNG state (dropout) and each rank's log of consumed samples;
- every `--snapshot-every` steps it also snapshots the same state into the job's node-local
  tmpfs directory (perdure.runtime.resume: a memcpy, written in the background), which
  outlives the process; at start it restores the newest of that snapshot (when every rank
  holds it) and the newest committed checkpoint, and carries on from there: a fault loses at
  most the snapshot interval, and restoring from tmpfs is cheaper than from storage;
- on a preemption notice (SIGTERM) the ranks agree on the step to stop at (StopVote: an
  all-reduce overlapped with the next step, every N steps where N steps take ~0.5 s, so it
  costs no time per step), save it synchronously and exit with the "suspended" status, so the
  job is requeued and resumes.

At the end rank 0 writes `result.json` into `--out` (default: the checkpoint directory): the
SHA-256 of the final weights and every (epoch, sample id) the run trained on, gathered from
all ranks.
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
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import Dataset

import perdure
from perdure.runtime import (
    Checkpointer,
    ElasticSampler,
    StopVote,
    goodput,
    resume,
    rng_state,
    set_rng_state,
)
from perdure.runtime.checkpoint import RankLocal, SavePolicy
from perdure.runtime.data import ElasticLoader
from perdure.runtime.rng import derive_seed, seed_everything

FEATURES = 32


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; checkpoint settings default to what perdure passes in the env."""
    env_every = os.environ.get("PERDURE_CHECKPOINT_EVERY")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--samples", type=int, default=1000, help="samples per epoch")
    p.add_argument("--batch", type=int, default=16, help="samples per rank per step")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step")
    p.add_argument("--log-every", type=int, default=20, help="print a line every N steps")
    p.add_argument("--checkpoint-dir", default=os.environ.get("PERDURE_CHECKPOINT_DIR"))
    p.add_argument("--checkpoint-every", type=int, default=int(env_every or 20))
    p.add_argument("--keep", type=int, default=3, help="committed checkpoints to keep")
    p.add_argument("--snapshot-every", type=int, default=10,
                   help="snapshot to node-local tmpfs every N steps under perdure (0: never)")
    p.add_argument("--out", default=None, help="where result.json goes (default: ckpt dir)")
    p.add_argument("--no-ledger", action="store_true",
                   help="keep no log of consumed samples (its size grows with the run's "
                        "steps; bench/recovery.py runs long and checks nothing)")
    p.add_argument("--timeline", default=None,
                   help="rank 0 appends a JSON line per step here (pid, step, end time, "
                        "seconds): what bench/recovery.py measures recovery from")
    return p.parse_args(argv)


class Samples(Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    """Synthetic regression data: sample i is (i, x_i, y_i), fixed by the seed."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, FEATURES, generator=g)
        w = torch.randn(FEATURES, 1, generator=g)
        self.y = self.x @ w + 0.1 * torch.randn(n, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        return i, self.x[i], self.y[i]


def build_model(hidden: int) -> nn.Module:
    """The MLP: dropout makes the run depend on each rank's RNG."""
    return nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Dropout(0.1),
                         nn.Linear(hidden, 1))


class Ledger:
    """Which (epoch, sample id) this rank trained on, by step: rolls back with the checkpoint.

    A fixed-size tensor (row = step * batch + position, -1 = empty) so that the checkpoint's
    layout, and so its save plan, stays the same from save to save.
    """

    def __init__(self, steps: int, batch: int) -> None:
        self.batch = batch
        self.rows = torch.full((steps * batch, 2), -1, dtype=torch.int64)

    def record(self, step: int, epoch: int, ids: torch.Tensor) -> None:
        if len(self.rows) == 0:  # --no-ledger
            return
        at = step * self.batch
        self.rows[at : at + len(ids), 0] = epoch
        self.rows[at : at + len(ids), 1] = ids

    def consumed(self) -> list[tuple[int, int]]:
        used = self.rows[self.rows[:, 0] >= 0]
        return [(int(e), int(i)) for e, i in used.tolist()]


class Timeline:
    """One JSON line per finished step (rank 0) and per start-up phase (every rank), appended
    in one write each: what bench/recovery.py measures recovery, and profiles it, from."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def step(self, step: int, seconds: float) -> None:
        self._write({"pid": os.getpid(), "step": step, "t": time.time(), "s": seconds,
                     "cpu": time.process_time(), "main": time.thread_time()})

    def mark(self, phase: str) -> None:
        """This process reached `phase` of its start (script, init, model, restore) now."""
        self._write({"pid": os.getpid(), "rank": os.environ.get("RANK", "0"), "mark": phase,
                     "t": time.time()})

    def _write(self, line: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(line) + "\n").encode())


def weights_sha256(model: nn.Module) -> str:
    """SHA-256 over every parameter and buffer, by name, in a fixed order."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def settle_ddp_buckets(ddp: nn.Module, example: torch.Tensor) -> None:
    """Run one throwaway forward/backward so DDP lays its gradient buckets out for good now.

    DDP re-lays its buckets out once, at its second iteration, in the order gradients became
    ready. gloo's ring all-reduce sums each element in an order that depends on where it sits
    in its bucket, so without this a resumed run's first step (the first after DDP was built)
    rounds differently from the same step of the uninterrupted run, and the weights drift
    apart in the last bits. The RNG is put back, so the throwaway pass draws nothing.
    """
    with torch.random.fork_rng(devices=[]):
        ddp(example).sum().backward()
    ddp.zero_grad(set_to_none=True)


class Run:
    """The training loop with its checkpointed state."""

    def __init__(self, args: argparse.Namespace, ctx: perdure.Context,
                 timeline: Timeline | None = None) -> None:
        self.args, self.ctx = args, ctx
        data = Samples(args.samples, seed=1)
        self.sampler = ElasticSampler(len(data), args.batch, seed=args.seed)
        self.loader = ElasticLoader(data, self.sampler)
        self.steps_per_epoch = self.sampler.steps_left(0, ctx.world_size)
        self.total = args.epochs * self.steps_per_epoch
        self.model = build_model(args.hidden)
        self.ddp: nn.Module = self.model
        if ctx.world_size > 1:
            self.ddp = DDP(self.model)
            settle_ddp_buckets(self.ddp, data.x[: args.batch])
        self.optim = torch.optim.AdamW(self.ddp.parameters(), lr=3e-3)
        # Each rank draws its own dropout masks: its RNG must be saved and restored per rank.
        seed_everything(derive_seed(args.seed, ctx.rank) % 2**63)
        self.ledger = Ledger(0 if args.no_ledger else self.total, args.batch)
        self.step = 0
        self.ckpt: Checkpointer | None = None
        if args.checkpoint_dir:
            policy = SavePolicy(every_steps=args.checkpoint_every)
            self.ckpt = Checkpointer(args.checkpoint_dir, keep=args.keep, policy=policy)
        self.saved_step: int | None = None
        # A node-local snapshot every few steps: what a group restart resumes from when it is
        # newer than the last checkpoint (None outside perdure, or with --snapshot-every 0).
        self.snap = resume.node_snapshotter() if args.snapshot_every > 0 else None
        # The ranks agree on the step to stop at in the background, every N steps where N
        # steps take ~0.5 s: no collective on the step's critical path, and a notice stops
        # every rank at most ~0.5 s (plus a step) after the first saw it.
        self.vote = StopVote(within=0.5)
        self.timeline = timeline if ctx.is_primary else None
        if timeline is not None:
            timeline.mark("model")

    def state(self) -> dict[str, Any]:
        state = {"model": self.model, "optim": self.optim, "data": self.loader,
                 "step": self.step, "rng": RankLocal(rng_state())}
        if len(self.ledger.rows):
            state["consumed"] = RankLocal(self.ledger.rows)
        return state

    def restore(self) -> None:
        """Continue from the newest snapshot or committed checkpoint, if there is one."""
        state = self.state()
        restored = resume.restore_newest(state, self.ckpt, self.snap)
        if restored.step is not None:
            self.step = int(state["step"])
            set_rng_state(state["rng"].value)
            # a snapshot's step has no checkpoint yet: a notice right now must still save one
            self.saved_step = restored.step if restored.from_checkpoint else None
        for line in restored.skipped_partial:
            print(line, flush=True)
        print(f"{self.ctx.replica} rank {self.ctx.rank}/{self.ctx.world_size} attempt "
              f"{self.ctx.attempt} restart {self.ctx.restart_count}: resumed from "
              f"{restored.describe()} in {restored.seconds:.2f}s", flush=True)

    def save(self, *, blocking: bool) -> None:
        if self.ckpt is None or self.saved_step == self.step:
            return
        self.ckpt.save(self.step, self.state(), blocking=blocking)  # reports to goodput
        self.saved_step = self.step

    def train_step(self, batch: Any) -> float:
        """One optimizer step on this rank's share of the global batch (None: an empty share)."""
        if batch is None:
            ids, x, y = torch.empty(0, dtype=torch.int64), torch.empty(0, FEATURES), \
                torch.empty(0, 1)
        else:
            ids, x, y = batch
        self.ledger.record(self.step, self.loader.epoch, ids)
        # Sum over this rank's samples over the batch size: DDP's average over ranks is then
        # the mean over the global batch, and an empty or short share weighs what it holds.
        loss = nn.functional.mse_loss(self.ddp(x), y, reduction="sum") / self.args.batch
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        if self.args.step_time:
            time.sleep(self.args.step_time)
        return float(loss.item())

    def batches(self) -> Any:
        """This rank's batches from the restored position to the end of the last epoch."""
        while self.loader.epoch < self.args.epochs:
            yield from self.loader
            self.loader.set_epoch(self.loader.epoch + 1)

    def train(self) -> None:
        stream = self.batches()
        while self.step < self.total:
            # A step, as goodput counts it, is the whole iteration: the batch, the update and
            # the agreement on a notice; the checkpoint save is reported on its own.
            began = time.perf_counter()
            with goodput.step(self.step + 1):
                loss = self.train_step(next(stream))
                self.step += 1
                stop = self.vote.poll(self.ctx.should_stop)
            if self.timeline is not None:
                self.timeline.step(self.step, time.perf_counter() - began)
            if self.step % self.args.log_every == 0 or self.step == self.total:
                print(f"step {self.step} epoch {self.loader.epoch} loss {loss:.4f}", flush=True)
            if stop:
                self.suspend()
            if self.ckpt is not None and self.step % self.args.checkpoint_every == 0:
                self.save(blocking=False)
            if self.snap is not None and self.step % self.args.snapshot_every == 0:
                self.snapshot()

    def snapshot(self) -> None:
        """Copy the state into host buffers; the background writes it to tmpfs."""
        assert self.snap is not None
        began = time.perf_counter()
        if self.snap.save(self.step, self.state()):
            goodput.snapshot_saved(self.step, time.perf_counter() - began)

    def suspend(self) -> None:
        """The preemption notice: save this step synchronously, then ask to be resumed."""
        self.save(blocking=True)
        if self.ckpt is not None:
            self.ckpt.wait()
        print(f"notice received: saved step {self.step}; exiting suspended", flush=True)
        goodput.flush()  # exit_suspended leaves with os._exit: no atexit flush
        self.ctx.exit_suspended()

    def finish(self) -> None:
        """Write the final hash and the consumed samples of every rank (rank 0), then exit 0."""
        self.vote.close()
        if self.ckpt is not None:
            self.ckpt.wait()
        if self.snap is not None:
            self.snap.close()
        mine = self.ledger.consumed()
        parts: list[Any] = [mine]
        if self.ctx.world_size > 1:
            parts = [None] * self.ctx.world_size
            dist.all_gather_object(parts, mine)
        digest = weights_sha256(self.model)
        if self.ctx.is_primary:
            out = Path(self.args.out or self.args.checkpoint_dir or ".")
            write_result(out, {
                "sha256": digest, "steps": self.step, "epochs": self.args.epochs,
                "world_size": self.ctx.world_size,
                "consumed": sorted(pair for part in parts for pair in part),
            })
        print(f"done: final weights sha256 {digest}", flush=True)
        goodput.flush()
        self.ctx.finish(0)


def write_result(out: Path, result: dict[str, Any]) -> None:
    """result.json, written whole or not at all (a reader never sees half of it)."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".result.json.{os.getpid()}"
    tmp.write_text(json.dumps(result))
    os.replace(tmp, out / "result.json")


def main() -> None:
    args = parse_args()
    imported = time.time()
    timeline = Timeline(args.timeline) if args.timeline else None
    if timeline is not None:
        timeline.mark("script")
    ctx = perdure.init(seed=args.seed)
    if timeline is not None:
        timeline.mark("init")
    run = Run(args, ctx, timeline)
    run.restore()
    if timeline is not None:
        timeline.mark("restore")
    print(f"ready: process group, model and restore took {time.time() - imported:.1f}s",
          flush=True)
    run.train()
    run.finish()


if __name__ == "__main__":
    main()
