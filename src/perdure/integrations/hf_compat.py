"""What differs between the transformers versions perdure supports (4.57 to 5.x), detected
once from the installed Trainer's own methods, never from its version string.

- `SPLIT_TRAINING_LOOP`: transformers 5 sets a run up in steps of their own
  (`_init_training_state`, `_prepare_for_training`), where PerdureTrainer restores; 4.57 does
  all of it inside one `_inner_training_loop`, whose epochs always count from 0: PerdureTrainer
  restores in `_load_optimizer_and_scheduler` and shifts the loop's epochs (`EpochShift`).

- `load_on_indexed_cpu`: with several processes, 4.57 loads a checkpoint's optimizer state with
  `map_location=args.device`, and accelerate names a CPU process's device `cpu:<local rank>`,
  which torch's CPU deserializer refuses: a stock Trainer on CPU with DDP cannot resume from its
  own checkpoint-N. Where torch refuses it, PerdureCallback registers a deserializer that takes
  `cpu:<n>` as the CPU (transformers 5 loads onto "cpu").

No side effects, but `load_on_indexed_cpu`'s registration.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import torch
from transformers import Trainer

__all__ = ["SPLIT_TRAINING_LOOP", "EpochShift", "load_on_indexed_cpu"]

SPLIT_TRAINING_LOOP = hasattr(Trainer, "_init_training_state") and \
    hasattr(Trainer, "_prepare_for_training")


class EpochShift:
    """A loader whose epoch `e`, as a loop counting from 0 sets it, is the loader's `e + shift`
    (everything else is the loader's own)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.shift = 0

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch + self.shift)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def load_on_indexed_cpu(device: torch.device) -> None:
    """Make torch.load take `cpu:<n>` (the Trainer's `device`) as the CPU, when the Trainer
    names such a device and the installed torch refuses it (see the module docstring)."""
    global _INDEXED_CPU
    if _INDEXED_CPU or device.type != "cpu" or device.index is None:
        return
    saved = io.BytesIO()
    torch.save(torch.zeros(1), saved)
    saved.seek(0)
    try:
        torch.load(saved, map_location=str(device), weights_only=True)
    except RuntimeError:
        torch.serialization.register_package(
            99, lambda obj: None, lambda obj, location: obj if location.startswith("cpu:")
            else None)
    _INDEXED_CPU = True


_INDEXED_CPU = False  # checked (and registered where needed) in this process
