"""A stock Hugging Face Trainer script (tiny GPT-2 from a config, synthetic tokens) + perdure.

The test's hooks, off unless asked for by the environment: STEP_FILE (rank 0 appends each
finished step), SLOW_SAVE_AT (rank 0 sleeps inside that step's save, after the weights and
before the trainer state: where a kill leaves a half-written `checkpoint-N`). At the end rank 0
writes result.json into OUT: the SHA-256 of the final weights and the step.
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
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from perdure.integrations.transformers import PerdureCallback


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)
        # the sample's index in its first two tokens: what the test's ledger reads back
        self.ids[:, 0] = torch.arange(n) // vocab
        self.ids[:, 1] = torch.arange(n) % vocab

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class TestHooks(TrainerCallback):  # type: ignore[misc]
    def __init__(self, trainer_ref: list[Trainer]) -> None:
        self.trainer_ref = trainer_ref
        self.step_file = os.environ.get("STEP_FILE")
        self.slow_at = int(os.environ.get("SLOW_SAVE_AT", "-1"))
        if self.step_file:  # for the test's SIGKILLs
            replica = os.environ.get("PERDURE_REPLICA", "worker-0")
            Path(f"{self.step_file}.pid-{replica}").write_text(str(os.getpid()))

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.step_file and state.is_world_process_zero:  # where each launch began
            with open(self.step_file + ".begin", "a") as f:
                f.write(f"{state.global_step}\n")

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.step_file and state.is_world_process_zero:
            with open(self.step_file, "a") as f:
                f.write(f"{state.global_step}\n")
        step_time = float(os.environ.get("STEP_TIME", "0"))
        if step_time:
            time.sleep(step_time)
        saving = Path(f"{self.step_file}.saving")
        if state.global_step == self.slow_at and state.is_world_process_zero \
                and not saving.exists():  # once: the resumed run saves this step normally
            trainer = self.trainer_ref[0]
            original = trainer._save_rng_state

            def slow(output_dir: str) -> None:
                saving.write_text(output_dir)
                time.sleep(60)
                original(output_dir)

            trainer._save_rng_state = slow


def with_ledger(base: type[Trainer]) -> type[Trainer]:
    """`base` recording, per rank, which samples each step trained on (LEDGER=1)."""

    class Ledgered(base):  # type: ignore[misc,valid-type]
        def training_step(self, model: Any, inputs: Any, *rest: Any) -> Any:
            ids = inputs["input_ids"][:, 0] * 64 + inputs["input_ids"][:, 1]
            gen = "-".join(os.environ.get(k, "0") for k in
                           ("PERDURE_JOB_ID", "PERDURE_ATTEMPT", "PERDURE_ROUND"))
            rank = int(os.environ.get("RANK", "0"))
            with open(f"{os.environ['STEP_FILE']}.ledger-{rank}", "a") as f:
                f.write(json.dumps([time.time(), gen, self.state.global_step + 1,
                                    [int(i) for i in ids]]) + "\n")
            return super().training_step(model, inputs, *rest)

    return Ledgered


def sha256(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-steps", type=int, default=10)
    p.add_argument("--out", required=True)
    p.add_argument("--trainer", choices=["stock", "perdure"], default="stock")
    p.add_argument("--embd", type=int, default=32, help="GPT-2 width (bench: larger)")
    p.add_argument("--layers", type=int, default=2)
    a = p.parse_args()
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=a.embd, n_layer=a.layers, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        max_steps=a.steps, save_steps=a.save_steps, per_device_train_batch_size=4,
        learning_rate=1e-3, seed=0, report_to="none", use_cpu=True, disable_tqdm=True,
        logging_steps=10, dataloader_num_workers=0,
    )
    ref: list[Trainer] = []
    if a.trainer == "perdure":
        from perdure.integrations.transformers import PerdureTrainer

        cls: type[Trainer] = PerdureTrainer
    else:
        cls = Trainer
    if os.environ.get("LEDGER"):
        cls = with_ledger(cls)
    trainer = cls(model=model, args=args, train_dataset=Tokens(256, 32, 64),
                      callbacks=[PerdureCallback(), TestHooks(ref)])
    ref.append(trainer)
    trainer.train()
    if trainer.is_world_process_zero():
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text(json.dumps({
            "sha256": sha256(model), "step": trainer.state.global_step,
            "output_dir": trainer.args.output_dir}))


if __name__ == "__main__":
    main()
