"""The files PerdureCheckpointIO leaves: whole Lightning checkpoints that torch.load and a
Trainer without perdure read, at a local path or an s3:// URL (never a local `s3:` folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.s3server import S3

pytest.importorskip("lightning")

import torch

from perdure.integrations.lightning import PerdureCheckpointIO

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "pl_train.py"

# The same model as pl_train.py, trained on by Lightning alone: no perdure import anywhere.
PLAIN = """
import sys
import lightning as L
import torch
from torch import nn

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 1))
        self.began = None

    def on_train_start(self):
        self.began = self.global_step

    def training_step(self, batch, batch_idx):
        ids, x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)

class Loader(torch.utils.data.DataLoader):
    # The checkpoint holds the position of a stateful loader (perdure's ElasticLoader):
    # Lightning wants one to give it to; this one starts its epoch over.
    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass

g = torch.Generator().manual_seed(1)
x = torch.randn(512, 16, generator=g)
data = torch.utils.data.TensorDataset(torch.arange(512), x, x.sum(1, keepdim=True))
model = Model()
trainer = L.Trainer(max_steps=30, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, Loader(data, batch_size=8), ckpt_path=sys.argv[1])
assert not [m for m in sys.modules if m.startswith("perdure")], "perdure was imported"
print(model.began, trainer.global_step)
"""


@pytest.mark.frameworks_long  # ~1 min: two Lightning runs
def test_checkpoints_load_with_torch_and_a_trainer_without_perdure(tmp_path: Path) -> None:
    env = {**os.environ, "CKPT_EVERY": "10"}
    env.pop("PERDURE_CHECKPOINT_DIR", None)
    out = subprocess.run([sys.executable, str(SCRIPT), "--out", "out", "--steps", "25"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    [ckpt] = (tmp_path / "checkpoints").glob("epoch=*-step=20.ckpt")  # ModelCheckpoint's
    loaded = torch.load(ckpt, weights_only=True)  # torch's default since 2.6
    assert loaded["global_step"] == 20 and "net.0.weight" in loaded["state_dict"]
    assert loaded["optimizer_states"][0]["state"]  # the whole training state, not weights
    plain = subprocess.run([sys.executable, "-c", PLAIN, str(ckpt)], cwd=tmp_path,
                           env={k: v for k, v in env.items() if k != "PYTHONPATH"},
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.stdout.split()[-2:] == ["20", "30"]  # resumed at 20, trained to 30


def lightning_dict(step: int) -> dict[str, object]:
    torch.manual_seed(step)
    return {"global_step": step, "epoch": 0, "state_dict": {"w": torch.randn(4, 3)},
            "loops": {"fit_loop": {"state_dict": {}}}, "hyper_parameters": {"lr": 0.1}}


def same(a: dict[str, object], b: dict[str, object]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else
        same(a[k], b[k]) if isinstance(a[k], dict) else a[k] == b[k]  # type: ignore[arg-type]
        for k in a)


def test_an_s3_url_stays_a_url(s3: S3, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """latest() used to write its pointer under ./s3:/bucket/... (Path collapses `//`)."""
    pytest.importorskip("s3fs")  # the s3 extra
    monkeypatch.chdir(tmp_path)
    url = s3.url("run")
    io = PerdureCheckpointIO(url)
    first, second = lightning_dict(10), lightning_dict(20)
    io.save_checkpoint(first, f"{url}/epoch=0-step=10.ckpt")
    io.save_checkpoint(second, f"{url}/epoch=0-step=20.ckpt")
    io.teardown()
    latest = io.latest()
    assert latest == f"{url}/latest-rank0.pointer"
    assert list(tmp_path.iterdir()) == []  # nothing local: no ./s3:/...
    assert same(io.load_checkpoint(latest), second)
    whole = io.load_checkpoint(f"{url}/epoch=0-step=10.ckpt")  # a whole checkpoint by now
    assert same(whole, first)
    fresh = PerdureCheckpointIO(url)  # another process's view
    assert same(fresh.load_checkpoint(f"{url}/epoch=0-step=20.ckpt"), second)


def test_a_local_pointer_becomes_the_whole_checkpoint_once_committed(tmp_path: Path) -> None:
    io = PerdureCheckpointIO(tmp_path / "ckpt")
    state = lightning_dict(5)
    path = tmp_path / "names" / "last.ckpt"
    io.save_checkpoint(state, path)
    assert json.loads(path.read_text())["step"] == 5  # at once: a pointer perdure resumes from
    io.teardown()
    assert same(torch.load(path, weights_only=True), state)
    io.save_checkpoint(lightning_dict(6), tmp_path / "names" / "gone.ckpt")
    io.remove_checkpoint(tmp_path / "names" / "gone.ckpt")  # Lightning's retention
    io.teardown()
    assert sorted(p.name for p in (tmp_path / "names").iterdir()) == ["last.ckpt"]
