"""A Hugging Face Trainer script in run_clm's shape, with no perdure in it: arguments through
HfArgumentParser (every TrainingArguments flag, `--resume_from_checkpoint DIR` included),
`checkpoint-N` folders in `--output_dir`, the final model saved there at the end.

    python hf_clm.py --output_dir out --max_steps 30 --save_steps 10
    python hf_clm.py --output_dir out --max_steps 30 --save_steps 10 \
        --resume_from_checkpoint out/checkpoint-20
"""

import time
from dataclasses import dataclass, field

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    HfArgumentParser,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


@dataclass
class ModelArguments:
    n_embd: int = field(default=32, metadata={"help": "width of the tiny GPT-2"})
    n_layer: int = field(default=2, metadata={"help": "its layers"})
    samples: int = field(default=512, metadata={"help": "synthetic training samples"})
    step_time: float = field(default=0.0, metadata={"help": "seconds each step sleeps"})


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int = 16, vocab: int = 64) -> None:
        self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(1))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class StepLog(TrainerCallback):
    """One line per step, with the time: what the run's log shows of its progress."""

    def __init__(self, step_time: float) -> None:
        self.step_time = step_time

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.step_time)
        if state.is_world_process_zero:
            print(f"step {state.global_step} at {time.time():.3f}", flush=True)


def main() -> None:
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    model_args, training_args = parser.parse_args_into_dataclasses()
    torch.manual_seed(training_args.seed)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=model_args.n_embd,
                        n_layer=model_args.n_layer, n_head=2, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    trainer = Trainer(model=model, args=training_args, train_dataset=Tokens(model_args.samples),
                      callbacks=[StepLog(model_args.step_time)])
    checkpoint = training_args.resume_from_checkpoint  # as run_clm.py passes it on
    result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model()
    print(f"trained {result.global_step} steps", flush=True)


if __name__ == "__main__":
    main()
