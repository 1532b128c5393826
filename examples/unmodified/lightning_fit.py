"""A Lightning script with no perdure in it: `Trainer.fit` with a ModelCheckpoint at every
epoch's end, `--ckpt_path` to resume from one, the final weights saved at the end.

    python lightning_fit.py --out out --epochs 4
    python lightning_fit.py --out out --epochs 4 --ckpt_path out/epoch=1-step=20.ckpt
"""

import argparse
import os
import time

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch import nn


class Regression(L.LightningModule):
    def __init__(self, step_time: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
        self.step_time = step_time

    def training_step(self, batch, batch_idx):
        x, y = batch
        time.sleep(self.step_time)
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


class StepLog(Callback):
    """One line per step, with the time: what the run's log shows of its progress."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.is_global_zero:
            print(f"step {trainer.global_step} at {time.time():.3f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="out")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--ckpt_path", default=None)
    p.add_argument("--step_time", type=float, default=0.0)
    p.add_argument("--devices", type=int, default=1)
    a = p.parse_args()
    L.seed_everything(0, workers=True)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(160, 16, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=16)  # 10 steps an epoch on 1 device
    model = Regression(a.step_time)
    trainer = L.Trainer(max_epochs=a.epochs, accelerator="cpu", devices=a.devices, logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[ModelCheckpoint(dirpath=a.out, save_top_k=-1), StepLog()])
    trainer.fit(model, loader, ckpt_path=a.ckpt_path)
    if trainer.is_global_zero:
        torch.save(model.state_dict(), os.path.join(a.out, "final.pt"))
        print(f"trained {trainer.global_step} steps", flush=True)


if __name__ == "__main__":
    main()
