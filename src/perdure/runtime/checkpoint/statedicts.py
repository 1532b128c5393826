"""The names torch's distributed state dicts give a module's parameters, and which modules
need torch's own helpers for their optimizer's state.

No side effects: reads the module.
"""

from __future__ import annotations

from torch import nn

from perdure.runtime import compat


def param_names(model: nn.Module) -> dict[int, str]:
    """id(parameter) -> its name as torch's distributed state dicts spell it (no DDP prefix)."""
    return {id(p): compat.fqn(model, n) for n, p in model.named_parameters()}


def needs_torch_optimizer_io(model: nn.Module) -> bool:
    """True for models whose optimizer state torch's helpers must shape (DTensor, FSDP1)."""
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.tensor import DTensor

    return any(isinstance(m, FullyShardedDataParallel) for m in model.modules()) or any(
        isinstance(p, DTensor) for p in model.parameters()
    )
