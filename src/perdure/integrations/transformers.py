"""perdure for Hugging Face Transformers (the `hf` extra): the public face.

- `PerdureCallback`: `Trainer(..., callbacks=[PerdureCallback()])` with nothing else changed
  (progress, preemption saves, resume from the newest complete `checkpoint-N`);
- `PerdureTrainer`: a `Trainer` whose saves go through perdure's async sharded Checkpointer
  and whose train sampler is the elastic sampler (exact resume on any world size).
"""

from __future__ import annotations

from perdure.integrations.hf_callback import PerdureCallback
from perdure.integrations.hf_trainer import PerdureTrainer

__all__ = ["PerdureCallback", "PerdureTrainer"]
