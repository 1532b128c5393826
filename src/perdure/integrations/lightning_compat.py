"""What differs between the Lightning versions perdure supports (2.4 to 2.6), detected once
from the installed Lightning's own signatures, never from its version string.

- `LOAD_TAKES_WEIGHTS_ONLY`: `TorchCheckpointIO.load_checkpoint` takes `weights_only` in
  Lightning 2.6 (and `Trainer.fit(weights_only=...)` passes it on); 2.4's takes
  `(path, map_location)` only, and torch's own default applies (weights_only=True since
  torch 2.6: the whole checkpoints PerdureCheckpointIO writes load either way).

No side effects.
"""

from __future__ import annotations

import inspect

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

__all__ = ["LOAD_TAKES_WEIGHTS_ONLY"]

LOAD_TAKES_WEIGHTS_ONLY = "weights_only" in inspect.signature(
    TorchCheckpointIO.load_checkpoint).parameters
