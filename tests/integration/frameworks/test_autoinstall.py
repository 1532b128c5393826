"""`integrations:` in a replica's interpreter: the Trainers an unmodified script makes get
perdure's callback once (never twice, whoever added it first) and, for Lightning, the
checkpoint plugin; a pool without the integration leaves them as they are. Each case is a
fresh interpreter started as a replica's is (perdure's start-up hook on PYTHONPATH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perdure.integrations.autoinstall import with_boot

HF = """
import json, torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from perdure.integrations.transformers import PerdureCallback
model = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=4, n_embd=8, n_layer=1, n_head=1))
args = TrainingArguments(output_dir="out", use_cpu=True, report_to="none")
count = lambda t: sum(isinstance(c, PerdureCallback) for c in t.callback_handler.callbacks)
plain = Trainer(model=model, args=args)
given = Trainer(model, args, callbacks=[PerdureCallback()])
given.add_callback(PerdureCallback)
print(json.dumps({"plain": count(plain), "given": count(given)}))
"""

LIGHTNING = """
import json
import lightning as L
from perdure.integrations.lightning import PerdureCallback, PerdureCheckpointIO
count = lambda t: sum(isinstance(c, PerdureCallback) for c in t.callbacks)
plain = L.Trainer(accelerator="cpu", logger=False)
given = L.Trainer(accelerator="cpu", logger=False, callbacks=[PerdureCallback()])
io = plain.strategy.checkpoint_io
print(json.dumps({"plain": count(plain), "given": count(given),
                  "io": type(io).__name__, "fit": plain._perdure_io is io}))
"""


def _run(tmp_path: Path, code: str, integrations: str) -> dict[str, object]:
    env = {**os.environ, "PERDURE_JOB_ID": "job-1", "PERDURE_INTEGRATIONS": integrations,
           "PERDURE_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
           "PYTHONPATH": with_boot(os.environ.get("PYTHONPATH", ""))}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_hugging_face_trainer_gets_perdures_callback_once(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    assert _run(tmp_path, HF, "transformers") == {"plain": 1, "given": 1}


@pytest.mark.frameworks_long  # the default suite's Lightning run resumes through the plugin
def test_a_lightning_trainer_gets_the_callback_and_the_checkpoint_plugin(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    found = _run(tmp_path, LIGHTNING, "lightning")
    assert found == {"plain": 1, "given": 1, "io": "PerdureCheckpointIO", "fit": True}
