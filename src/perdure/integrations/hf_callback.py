"""perdure for the Hugging Face Trainer: `Trainer(..., callbacks=[PerdureCallback()])`
(import it from `perdure.integrations.transformers`; docs/guides/hf-trainer.md says what it does).

Steps, saves and the resume are reported to perdure; a preemption notice, agreed by every rank,
becomes a save and an exit "suspended". After each rank's save a marker records that it finished
`checkpoint-N`, and `train()` resumes from the newest folder every rank finished. The rules
(which folder is complete, which to resume) live in `perdure.runtime.folders`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

import perdure
from perdure.integrations import hf_compat
from perdure.runtime import StopVote, folders, goodput

__all__ = ["PerdureCallback"]  # and PerdureTrainer, loaded on first use

TRAINER_DEFAULT_OUTPUT_DIR = "trainer_output"  # what TrainingArguments() picks without one
CHECKPOINT_PREFIX = "checkpoint-"


class PerdureCallback(TrainerCallback):  # type: ignore[misc]
    """Progress, preemption and safe resume for a stock Trainer (docs/guides/hf-trainer.md).

    vote_within: seconds; the ranks agree on a notice at most this long after it arrived
    (plus a step), without a collective on every step.
    """

    def __init__(self, *, vote_within: float = 0.5) -> None:
        self.ctx = perdure.init()
        self.vote = StopVote(within=vote_within)
        self.stopping = False
        self._mark: float | None = None  # when the step being timed began
        self._train_called: float | None = None
        self.manage_folders = True  # off under PerdureTrainer, which saves through perdure

    # ---- where the Trainer saves, and what it resumes from --------------------------------

    def on_init_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        if args.output_dir == TRAINER_DEFAULT_OUTPUT_DIR and self.ctx.checkpoint_dir:
            args.output_dir = self.ctx.checkpoint_dir
        hf_compat.load_on_indexed_cpu(args.device)
        trainer = _calling_trainer()
        if getattr(trainer, "perdure_checkpoints", False):
            self.manage_folders = False
        elif trainer is not None:
            _resume_through(trainer, self)

    def train_called(self) -> None:
        """`train()` was called now: what the restore time is measured from."""
        self._train_called = time.perf_counter()

    def resume_point(self, output_dir: str | None, given: str | bool | None) -> str | None:
        """The checkpoint folder `train()` loads: a folder the script named that exists, else
        the newest one every rank finished (None: from scratch). Every rank, at once."""
        output_dir = output_dir or TRAINER_DEFAULT_OUTPUT_DIR
        choice = folders.agree_resume(output_dir, CHECKPOINT_PREFIX)
        note = choice.note()
        if note is not None and self.ctx.is_primary:
            print(f"perdure: {note}", file=sys.stderr, flush=True)
            goodput.note(note)
        self.train_called()
        if isinstance(given, str) and os.path.isdir(given):
            return given
        return None if choice.name is None else os.path.join(output_dir, choice.name)

    # ---- progress -------------------------------------------------------------------------

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, **kwargs: Any) -> None:
        now = time.perf_counter()
        began = self._train_called if self._train_called is not None else now
        goodput.checkpoint_restored(state.global_step or None, now - began)
        self._mark = now

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        if self.vote.poll(self.ctx.should_stop):
            control.should_save = True
            control.should_training_stop = True
            self.stopping = True
        now = time.perf_counter()
        goodput.reporter().step(state.global_step, now - (self._mark or now))
        self._mark = now

    def on_save(self, args: TrainingArguments, state: TrainerState,
                control: TrainerControl, **kwargs: Any) -> None:
        now = time.perf_counter()
        if self.manage_folders:
            root = args.output_dir or TRAINER_DEFAULT_OUTPUT_DIR
            folder = os.path.join(root, f"{CHECKPOINT_PREFIX}{state.global_step}")
            folders.mark_complete(folder, self.ctx.rank, self.ctx.world_size)
        goodput.checkpoint_saved(state.global_step, now - (self._mark or now))
        self._mark = time.perf_counter()
        if self.stopping:
            self._exit_suspended(state.global_step)

    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> None:
        self.vote.close()
        goodput.flush()

    def _exit_suspended(self, step: int) -> None:
        """Every rank has saved `step`: leave with the status that asks to be resumed."""
        import torch.distributed as dist

        self.vote.close()
        if dist.is_available() and dist.is_initialized():
            with contextlib.suppress(Exception):  # a peer already gone must not stop the exit
                dist.barrier()
        print(f"perdure: preemption notice: saved step {step}; exiting suspended", flush=True)
        self.ctx.exit_suspended()


def _calling_trainer() -> Trainer | None:
    """The Trainer whose __init__ is running this callback's on_init_end (a few frames up)."""
    frame = sys._getframe(1)
    for _ in range(12):
        if frame.f_back is None:
            return None
        frame = frame.f_back
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
    return None


def _resume_through(trainer: Trainer, callback: PerdureCallback) -> None:
    """Make `trainer.train()` resume from the folder perdure chose (unless told False)."""
    original = trainer.train

    def train(resume_from_checkpoint: str | bool | None = None, *args: Any,
              **kwargs: Any) -> Any:
        if resume_from_checkpoint is not False:
            resume_from_checkpoint = callback.resume_point(trainer.args.output_dir,
                                                           resume_from_checkpoint)
        return original(resume_from_checkpoint, *args, **kwargs)

    train.__doc__ = original.__doc__
    trainer.train = train  # type: ignore[method-assign]
