"""torch's distributed state dicts of a module and its optimizer, with torch's per-call work done
once per layout.

``get_model_state_dict`` and ``get_optimizer_state_dict`` verify their options (a walk over
every module and parameter, looking for FSDP) and name every key and parameter, on every call:
~0.35 ms of a small model's ~1 ms save() on the training thread, more than the rest of save().
For a module without FSDP, what they return is ``module.state_dict()`` with its keys renamed
(DDP's and torch.compile's prefixes dropped) and ``optimizer.state_dict()`` with each
parameter's position replaced by its name. So the renaming is learned from torch's own result
at the first save of a layout, and kept only when that result is exactly the renamed plain
state dict: the same keys in the same order, the same tensors (storage, shape, strides), equal
plain values (proven, not assumed). A later save whose module is of the same class and whose
state dict has the same keys (the module), or whose optimizer updates the same parameters of a
module whose keys were just checked (the optimizer), renames the plain state dict the same
way: a few microseconds. Anything else (another layout, a module with FSDP or DTensor
parameters, a result that differs) asks torch, as before.

No side effects beyond the cache: reads the state.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

from perdure.runtime import compat


@dataclass(frozen=True)
class _ModelNames:
    """A module's state-dict keys and torch's name for each, in torch's order."""

    kind: type  # the module's class (FSDP2's fully_shard changes it in place)
    keys: list[str]  # module.state_dict()'s keys, in its order
    names: list[tuple[str, str]]  # (torch's name, the key it renames), in torch's order


@dataclass(frozen=True)
class _OptimizerNames:
    """An optimizer's parameters (by identity, in position order) and their names."""

    model: _ModelNames  # the module's names these were learned with
    params: tuple[int, ...]  # id() of each parameter, in the optimizer's order
    names: list[str]  # the name of each


class StateDicts:
    """The state dicts a save stores for its modules and optimizers, as torch names them."""

    def __init__(self) -> None:
        self._models: weakref.WeakKeyDictionary[nn.Module, _ModelNames] = (
            weakref.WeakKeyDictionary()
        )
        self._optimizers: weakref.WeakKeyDictionary[torch.optim.Optimizer, _OptimizerNames] = (
            weakref.WeakKeyDictionary()
        )
        self._checked: dict[int, _ModelNames] = {}  # id(module) -> names, this save's checks

    def begin(self) -> None:
        """Start a save: the modules' keys are checked again before an optimizer trusts them."""
        self._checked.clear()

    def model(self, module: nn.Module) -> dict[str, Any]:
        """``get_model_state_dict(module)``."""
        plain = module.state_dict()
        known = self._models.get(module)
        if known is not None and type(module) is known.kind and list(plain) == known.keys:
            self._checked[id(module)] = known
            return {name: plain[key] for name, key in known.names}
        torch_sd: dict[str, Any] = dict(get_model_state_dict(module))
        learned = _learn_model(module, plain, torch_sd)
        if learned is None:
            self._models.pop(module, None)
        else:
            self._models[module] = self._checked[id(module)] = learned
        return torch_sd

    def optimizer(self, optim: torch.optim.Optimizer, module: nn.Module) -> dict[str, Any]:
        """``get_optimizer_state_dict(module, optim)`` of an optimizer that has state."""
        known = self._optimizers.get(optim)
        model = self._checked.get(id(module))
        if known is not None and model is not None and known.model is model:
            params = tuple(id(p) for g in optim.param_groups for p in g["params"])
            if params == known.params:
                return _renamed(optim.state_dict(), known.names)
        torch_sd: dict[str, Any] = dict(get_optimizer_state_dict(module, optim))
        learned = None if model is None else _learn_optimizer(optim, module, model, torch_sd)
        if learned is None:
            self._optimizers.pop(optim, None)
        else:
            self._optimizers[optim] = learned
        return torch_sd


def _learn_model(
    module: nn.Module, plain: dict[str, Any], torch_sd: dict[str, Any]
) -> _ModelNames | None:
    """The renaming that turns ``plain`` into ``torch_sd``, or None when there is none (or the
    module is one torch's helper treats specially). No side effects."""
    if needs_torch_optimizer_io(module):
        return None
    key_of = {_torch_name(module, key): key for key in plain}
    if len(key_of) != len(plain) or set(key_of) != set(torch_sd):
        return None
    names = [(name, key_of[name]) for name in torch_sd]
    if not same({name: plain[key] for name, key in names}, torch_sd):
        return None
    return _ModelNames(type(module), list(plain), names)


def _learn_optimizer(
    optim: torch.optim.Optimizer, module: nn.Module, model: _ModelNames, torch_sd: dict[str, Any]
) -> _OptimizerNames | None:
    """The names of ``optim``'s parameters, when renaming its plain state dict by them gives
    ``torch_sd``; None otherwise. No side effects."""
    by_id = param_names(module)
    params = [p for g in optim.param_groups for p in g["params"]]
    if any(id(p) not in by_id for p in params):
        return None
    names = [by_id[id(p)] for p in params]
    if not same(_renamed(optim.state_dict(), names), torch_sd):
        return None
    return _OptimizerNames(model, tuple(id(p) for p in params), names)


def param_names(model: nn.Module) -> dict[int, str]:
    """id(parameter) -> its name as torch's distributed state dicts spell it (no DDP prefix)."""
    return {id(p): _torch_name(model, n) for n, p in model.named_parameters()}


def _torch_name(model: nn.Module, key: str) -> str:
    return compat.fqn(model, key)


def needs_torch_optimizer_io(model: nn.Module) -> bool:
    """True for models whose optimizer state torch's helpers must shape (DTensor, FSDP1)."""
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.tensor import DTensor

    return any(isinstance(m, FullyShardedDataParallel) for m in model.modules()) or any(
        isinstance(p, DTensor) for p in model.parameters()
    )


def _renamed(plain: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """An optimizer's state dict with parameter positions replaced by ``names``."""
    return {
        "state": {names[pid]: value for pid, value in plain["state"].items()},
        "param_groups": [
            dict(g, params=[names[pid] for pid in g["params"]]) for g in plain["param_groups"]
        ],
    }


def same(a: Any, b: Any) -> bool:
    """Whether two state dicts hold the same thing: dicts with the same keys in the same order,
    sequences of the same length, the same tensors (type, storage, offset, shape, strides,
    dtype) and equal plain values of the same type. No side effects."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return bool(
            a.device == b.device
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.stride() == b.stride()
            and a.data_ptr() == b.data_ptr()
        )
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:  # a value that cannot say: not proven the same
        return False
