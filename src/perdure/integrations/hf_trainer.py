"""PerdureTrainer: a Hugging Face `Trainer` whose checkpoints and data order are perdure's
(import it from `perdure.integrations.transformers`; docs/guides/hf-trainer.md).

Saves go through perdure's Checkpointer into `output_dir` (`save_steps` and `save_total_limit`
still decide when and how many); every `train()` restores the model, optimizer, scheduler, each
rank's RNG, the Trainer's state and the data position from the newest committed checkpoint. The
train sampler is the ElasticSampler: it drops an epoch's last, partial global batch (as
`dataloader_drop_last=True` would) so that every rank gets a full batch, on any number of
replicas. Where it hooks into the Trainer differs between transformers 4.57 and 5 (hf_compat).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

from transformers import Trainer, TrainerState

from perdure.integrations.hf_callback import TRAINER_DEFAULT_OUTPUT_DIR, PerdureCallback
from perdure.integrations.hf_compat import SPLIT_TRAINING_LOOP, EpochShift
from perdure.runtime import (
    Checkpointer,
    ElasticLoader,
    ElasticSampler,
    RankLocal,
    goodput,
    rng_state,
    set_rng_state,
)

__all__ = ["PerdureTrainer"]


class _TrainerStateBox:
    """The Trainer's own state (step, epoch, log history, ...) as one JSON string."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.loaded: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"json": json.dumps(dataclasses.asdict(self.trainer.state), sort_keys=True)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loaded = json.loads(state["json"])


class PerdureTrainer(Trainer):  # type: ignore[misc]
    """A Trainer with perdure's checkpoints and exact, elastic data resume (see
    docs/guides/hf-trainer.md)."""

    perdure_checkpoints = True  # tells PerdureCallback not to manage checkpoint-N folders

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        callbacks = list(kwargs.pop("callbacks", None) or [])
        found = [cb for cb in callbacks if isinstance(cb, PerdureCallback)]
        self.perdure = found[0] if found else PerdureCallback()
        if not found:
            callbacks.append(self.perdure)
        kwargs["callbacks"] = callbacks
        super().__init__(*args, **kwargs)
        self._ckpt: Checkpointer | None = None
        self._loader: ElasticLoader | None = None
        self._shifted: EpochShift | None = None  # the loop's view of it (transformers 4.57)
        self._resumed_step: int | None = None

    # ---- data -----------------------------------------------------------------------------

    def get_train_dataloader(self) -> ElasticLoader | EpochShift:  # type: ignore[override]
        if self.train_dataset is None:
            raise ValueError("PerdureTrainer: training requires a train_dataset.")
        args = self.args
        sampler = ElasticSampler(len(self.train_dataset),  # type: ignore[arg-type]
                                 self._train_batch_size,
                                 seed=args.data_seed if args.data_seed is not None else args.seed,
                                 drop_last=True)
        self._loader = ElasticLoader(self.train_dataset, sampler,
                                     collate_fn=self.data_collator,
                                     num_workers=args.dataloader_num_workers)
        if SPLIT_TRAINING_LOOP:
            return self._loader
        self._shifted = EpochShift(self._loader)
        return self._shifted

    # ---- checkpoints ----------------------------------------------------------------------

    def checkpointer(self) -> Checkpointer:
        """perdure's Checkpointer over `output_dir` (made at first use, on every rank)."""
        if self._ckpt is None:
            root = self.args.output_dir or TRAINER_DEFAULT_OUTPUT_DIR
            # The callback reports each save and the resume, from the step's end and from
            # train(): spans that hold the Checkpointer's, which would otherwise count twice.
            self._ckpt = Checkpointer(root, keep=self.args.save_total_limit or 3,
                                      report_times=False)
        return self._ckpt

    def _perdure_state(self, *, heavy: bool) -> dict[str, Any]:
        assert self._loader is not None, "the train dataloader is made before any save"
        state: dict[str, Any] = {"trainer": _TrainerStateBox(self), "data": self._loader}
        if heavy:
            optim = getattr(self.optimizer, "optimizer", self.optimizer)  # accelerate's wrapper
            state.update(model=self.model, optim=optim, sched=self.lr_scheduler,
                         rng=RankLocal(rng_state()))
        return state

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        # On a preemption notice the save must be committed before the replicas leave.
        blocking = self.perdure.stopping
        self.checkpointer().save(self.state.global_step, self._perdure_state(heavy=True),
                                 blocking=blocking)

    def _init_training_state(self, max_steps: int, num_update_steps_per_epoch: int,
                             num_train_epochs: int, resume_from_checkpoint: Any,
                             trial: Any) -> tuple[int, int]:
        """transformers 5: fresh state, then the Trainer's state and the data position from
        the newest committed checkpoint; the epoch to start in comes from the data position."""
        super()._init_training_state(max_steps, num_update_steps_per_epoch, num_train_epochs,
                                     None, trial)
        if not self._restore_light():
            return 0, 0
        self.state.init_training_references(  # type: ignore[no-untyped-call]
            self, max_steps, num_train_epochs, trial)
        return self._first_epoch(), 0

    def _prepare_for_training(self, max_steps: int, train_dataloader: Any,
                              resume_from_checkpoint: Any) -> Any:
        """transformers 5: wrap the model, make the optimizer and scheduler, then load their
        state."""
        out = super()._prepare_for_training(  # type: ignore[no-untyped-call]
            max_steps, train_dataloader, None)
        self._restore_heavy()
        return out

    def _load_optimizer_and_scheduler(self, checkpoint: Any) -> None:
        """transformers 4.57: called (with no checkpoint) once the model is wrapped and the
        optimizer and scheduler are made, after the fresh TrainerState: restore everything
        here (the loop then calls init_training_references itself), and shift the loop's
        epochs (it counts from 0) to the restored one."""
        if SPLIT_TRAINING_LOOP:
            super()._load_optimizer_and_scheduler(checkpoint)
            return
        if self._restore_light():
            assert self._shifted is not None
            self._shifted.shift = self._first_epoch()
            self._restore_heavy()

    def _restore_light(self) -> bool:
        """The Trainer's state and the data position from the newest committed checkpoint;
        False when there is none."""
        began = time.perf_counter()
        light = self._perdure_state(heavy=False)
        self._resumed_step = self.checkpointer().restore_latest(light)
        for line in self.checkpointer().skipped_partial:
            print(f"perdure: {line}", flush=True)
        self._restore_seconds = time.perf_counter() - began
        if self._resumed_step is None:
            return False
        self.state = TrainerState(**light["trainer"].loaded)
        return True

    def _first_epoch(self) -> int:
        """The epoch the restored data position is in; the next one when it was saved at
        that epoch's last step."""
        assert self._loader is not None
        finished = len(self._loader) == 0
        return int(self._loader.epoch) + int(finished)

    def _restore_heavy(self) -> None:
        """The model, optimizer, scheduler and RNG state of the step `_restore_light` found."""
        if self._resumed_step is None:
            return
        began = time.perf_counter()
        heavy = self._perdure_state(heavy=True)
        self.checkpointer().restore(heavy, self._resumed_step)
        set_rng_state(heavy["rng"].value)
        self._restore_seconds += time.perf_counter() - began
        print(f"perdure: resumed from step {self._resumed_step} "
              f"({self.checkpointer().url}) in {self._restore_seconds:.2f}s", flush=True)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any,
              **kwargs: Any) -> Any:
        """Train, resuming from the newest committed perdure checkpoint in `output_dir`."""
        if isinstance(resume_from_checkpoint, (str, os.PathLike)):
            raise ValueError(
                f"resume_from_checkpoint={resume_from_checkpoint!r}: PerdureTrainer resumes from "
                "the newest committed perdure checkpoint in output_dir by itself; call train() "
                "without it (or use Trainer with PerdureCallback for checkpoint-N folders).")
        self.perdure.train_called()
        result = super().train(None, *args, **kwargs)
        self.checkpointer().wait()
        goodput.flush()
        return result
