"""A Lightning script (MLP with dropout, synthetic data, DDP on gloo) with PerdureCallback and
PerdureCheckpointIO. Test hooks as in hf_train.py: STEP_FILE (rank 0 appends each finished
step; each launch's start step goes to STEP_FILE.begin; pids to STEP_FILE.pid-<replica>),
LEDGER=1 (each rank appends the samples of each step), STEP_TIME (seconds of sleep a step),
CKPT_EVERY (ModelCheckpoint's every_n_train_steps, default 10), DATA=shards (the same samples
from 8 shards through a ShardDataset: no length, Lightning reads a batch ahead).
At the end rank 0 writes result.json into --out: the SHA-256 of the weights and the step.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn

from perdure.integrations.lightning import PerdureCallback, PerdureCheckpointIO
from perdure.runtime import ElasticLoader, ElasticSampler, ShardDataset

SAMPLES, FEATURES = 512, 16


class Samples(torch.utils.data.Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(SAMPLES, FEATURES, generator=g)
        self.y = self.x @ torch.randn(FEATURES, 1, generator=g)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        return i, self.x[i], self.y[i]


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Dropout(0.1),
                                 nn.Linear(64, 1))
        self.step_file = os.environ.get("STEP_FILE")

    def train_dataloader(self) -> Any:
        samples = Samples()
        if os.environ.get("DATA") == "shards":
            per = SAMPLES // 8

            def read(shard: str) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
                first = int(shard) * per
                return [samples[i] for i in range(first, first + per)]

            return ElasticLoader(ShardDataset([str(k) for k in range(8)], read, seed=0),
                                 batch_size=8)
        return ElasticLoader(samples, ElasticSampler(SAMPLES, 8, seed=0, drop_last=True))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        ids, x, y = batch
        if self.step_file and os.environ.get("LEDGER"):
            gen = "-".join(os.environ.get(k, "0") for k in
                           ("PERDURE_JOB_ID", "PERDURE_ATTEMPT", "PERDURE_ROUND"))
            with open(f"{self.step_file}.ledger-{self.global_rank}", "a") as f:
                f.write(json.dumps([time.time(), gen, self.global_step + 1,
                                    [int(i) for i in ids]]) + "\n")
        return nn.functional.mse_loss(self.net(x), y)

    def on_train_start(self) -> None:
        if self.step_file and self.global_rank == 0:
            with open(f"{self.step_file}.begin", "a") as f:
                f.write(f"{self.global_step}\n")

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.step_file and self.global_rank == 0:
            with open(self.step_file, "a") as f:
                f.write(f"{self.global_step}\n")
        time.sleep(float(os.environ.get("STEP_TIME", "0")))

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    step_file = os.environ.get("STEP_FILE")
    if step_file:
        replica = os.environ.get("PERDURE_REPLICA", "worker-0")
        Path(f"{step_file}.pid-{replica}").write_text(str(os.getpid()))
    callback = PerdureCallback()
    L.seed_everything(0)
    model = Model()
    io = PerdureCheckpointIO()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    every = int(os.environ.get("CKPT_EVERY", "10"))
    trainer = L.Trainer(
        max_steps=a.steps, accelerator="cpu", devices=local,
        num_nodes=int(os.environ.get("WORLD_SIZE", "1")) // local,
        strategy="ddp" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "auto",
        callbacks=[callback, L.pytorch.callbacks.ModelCheckpoint(every_n_train_steps=every)],
        plugins=[io], logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=os.environ.get("PERDURE_CHECKPOINT_DIR", "."))
    trainer.fit(model, ckpt_path=io.latest())
    if trainer.global_rank == 0:
        h = hashlib.sha256()
        for name, t in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().contiguous().numpy().tobytes())
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text(json.dumps({"sha256": h.hexdigest(),
                                                     "step": trainer.global_step}))


if __name__ == "__main__":
    main()
