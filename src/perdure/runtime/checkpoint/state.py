"""A user's state (modules, optimizers, stateful objects, tensors, plain values) as a nested
dict of tensors and plain values, and restored values put back into the user's objects.

Keys follow torch's distributed state dicts (no DDP ``module.`` prefix, optimizer state keyed
by parameter name), so a checkpoint saved on one world size or wrapper loads on another.
Side effects: ``apply`` writes into the user's objects; nothing else does.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, MutableMapping
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from perdure.runtime.checkpoint import values
from perdure.runtime.checkpoint.errors import CheckpointMismatchError

RANK_SUFFIX = "@rank"
# The attribute each wrapper keeps its module under, which torch's state-dict names drop.
_WRAPPED = {"module": "DistributedDataParallel", "_orig_mod": "OptimizedModule",
            "_checkpoint_wrapped_module": "CheckpointWrapper",
            "_fsdp_wrapped_module": "FullyShardedDataParallel"}


class RankLocal:
    """Mark a state value that differs per rank (an RNG state, a per-rank data cursor).

    Each rank saves its own copy under ``<key>@rank<r>`` and restores its own; after a change
    of world size, a rank the checkpoint had no copy for keeps its current value.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"RankLocal({self.value!r})"


class Kind(enum.Enum):
    """How a top-level state value is turned into a state dict and restored."""

    MODULE = "module"
    OPTIMIZER = "optimizer"
    TENSOR = "tensor"
    STATEFUL = "stateful"
    VALUE = "value"


def kind_of(value: Any) -> Kind:
    """Classify one top-level state value. No side effects."""
    if type(value) in values.PLAIN:  # a step counter: saved every time, no checks needed
        return Kind.VALUE
    if isinstance(value, nn.Module):
        return Kind.MODULE
    if isinstance(value, torch.optim.Optimizer):
        return Kind.OPTIMIZER
    if isinstance(value, torch.Tensor):
        return Kind.TENSOR
    if callable(getattr(value, "state_dict", None)) and callable(
        getattr(value, "load_state_dict", None)
    ):
        return Kind.STATEFUL
    return Kind.VALUE


def stored_key(key: str, value: Any, rank: int) -> str:
    """The top-level key ``value`` is stored under: ``key``, or ``key@rank<r>`` if RankLocal."""
    return f"{key}{RANK_SUFFIX}{rank}" if isinstance(value, RankLocal) else key


def check_state(state: Any) -> Mapping[str, Any]:
    """Refuse a state that is not a dict with str keys, naming what is wrong."""
    if not isinstance(state, Mapping):
        raise TypeError(
            f"state must be a dict of name -> value (e.g. {{'model': model, 'optim': optim}}), "
            f"not {type(state).__name__}."
        )
    for key in state:
        if not isinstance(key, str) or not key or "." in key or RANK_SUFFIX in key:
            raise ValueError(
                f"state key {key!r} is not allowed: top-level keys must be non-empty str "
                f"without '.' or '{RANK_SUFFIX}'."
            )
    return state


def state_tree(
    state: Mapping[str, Any], rank: int, entries: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Nested dict of tensors and plain values for ``state`` (values are not copied): torch's
    distributed state dicts of its modules and optimizers. ``entries``: the checkpoint's, when
    the tree is the target of a restore."""
    modules = [v for v in state.values() if isinstance(v, nn.Module)]
    out: dict[str, Any] = {}
    for key, wrapped in state.items():
        value = wrapped.value if isinstance(wrapped, RankLocal) else wrapped
        skey = stored_key(key, wrapped, rank)
        kind = kind_of(value)
        if kind is Kind.MODULE:
            tree: Any = dict(get_model_state_dict(value))
        elif kind is Kind.OPTIMIZER:
            # A restore into plain models loads optimizer state into fresh tensors; sharded
            # ones need torch's helper, which first initialises the state with a zero step.
            model = owner(key, value, modules)
            shaped = (entries is not None and needs_torch_optimizer_io(model)
                      and has_optimizer_state(entries, skey))
            tree = optimizer_tree(value, model, initialise=shaped)
        elif kind is Kind.STATEFUL:
            tree = value.state_dict()
        else:
            tree = value
        out[skey] = tree
    return out


def owner(key: str, optim: torch.optim.Optimizer, modules: list[nn.Module]) -> nn.Module:
    """The module in the state whose parameters ``optim`` updates."""
    first = next((p for g in optim.param_groups for p in g["params"]), None)
    for module in modules:
        if first is not None and any(p is first for p in module.parameters()):
            return module
    raise ValueError(
        f"optimizer {key!r} updates parameters of no nn.Module in the state; put its model in "
        "the same state dict (e.g. {'model': model, 'optim': optim}) so that its state is "
        "saved by parameter name and loads on any world size."
    )


def optimizer_tree(
    optim: torch.optim.Optimizer, model: nn.Module, *, initialise: bool
) -> dict[str, Any]:
    """The optimizer's state keyed by parameter name; one that has not stepped yet as its
    param groups only, unless ``initialise`` (torch's helper would give it a zero step)."""
    if optim.state or initialise:
        return dict(get_optimizer_state_dict(model, optim))
    return {"state": {}, "param_groups": _named_groups(optim, model)}


def fqn(model: nn.Module, key: str) -> str:
    """``key`` of ``model.state_dict()`` as torch's distributed state dicts name it (without
    the wrappers' attributes). No side effects."""
    names: list[str] = []
    current: Any = model
    for part in key.split("."):
        wrapper = _WRAPPED.get(part)
        if wrapper is None or wrapper not in {c.__name__ for c in type(current).__mro__}:
            names.append(part)
        current = getattr(current, part, None) if isinstance(current, nn.Module) else None
    return ".".join(names)


def param_names(model: nn.Module) -> dict[int, str]:
    """id(parameter) -> its name as torch's distributed state dicts spell it."""
    return {id(p): fqn(model, n) for n, p in model.named_parameters()}


def needs_torch_optimizer_io(model: nn.Module) -> bool:
    """True for models whose optimizer state torch's helpers must shape (DTensor, FSDP1)."""
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.tensor import DTensor

    return any(isinstance(m, FullyShardedDataParallel) for m in model.modules()) or any(
        isinstance(p, DTensor) for p in model.parameters()
    )


def _named_groups(optim: torch.optim.Optimizer, model: nn.Module) -> list[dict[str, Any]]:
    names = param_names(model)
    groups = []
    for group in optim.param_groups:
        saved = {k: v for k, v in group.items() if k != "params"}
        saved["params"] = [names[id(p)] for p in group["params"]]
        groups.append(saved)
    return groups


def has_optimizer_state(entries: Mapping[str, Any], key: str) -> bool:
    """True when the checkpoint's ``key`` holds per-parameter optimizer tensors."""
    prefix = f"{key}.state."
    return any(fqn.startswith(prefix) and e["kind"] == "tensor" for fqn, e in entries.items())


def apply(state: MutableMapping[str, Any], key: str, loaded: Any) -> None:
    """Put the restored tree ``loaded`` for ``key`` back into the user's state, in place."""
    wrapped = state[key]
    value = wrapped.value if isinstance(wrapped, RankLocal) else wrapped
    kind = kind_of(value)
    if kind is Kind.MODULE:
        if not _loaded_in_place(value, loaded):
            set_model_state_dict(value, loaded)
    elif kind is Kind.OPTIMIZER:
        modules = [v for v in state.values() if isinstance(v, nn.Module)]
        _apply_optimizer(key, value, owner(key, value, modules), loaded)
    elif kind is Kind.STATEFUL:
        value.load_state_dict(loaded)
    elif kind is Kind.TENSOR:
        if loaded is not value:
            value.copy_(loaded)
    elif isinstance(wrapped, RankLocal):
        wrapped.value = loaded
    else:
        state[key] = loaded


def _apply_optimizer(
    key: str, optim: torch.optim.Optimizer, model: nn.Module, loaded: dict[str, Any]
) -> None:
    if loaded.get("state"):
        if needs_torch_optimizer_io(model):
            set_optimizer_state_dict(model, optim, loaded)
        else:
            _load_by_name(key, optim, model, loaded)
        return
    groups = loaded.get("param_groups", [])
    if len(groups) != len(optim.param_groups) or any(
        len(g["params"]) != len(live["params"])
        for g, live in zip(groups, optim.param_groups, strict=True)
    ):
        raise CheckpointMismatchError(
            f"optimizer {key!r}: the checkpoint has {len(groups)} param groups of sizes "
            f"{[len(g['params']) for g in groups]}, the optimizer has "
            f"{[len(g['params']) for g in optim.param_groups]}; restore into the optimizer "
            "that was saved."
        )
    optim.state.clear()  # the saved optimizer had not stepped yet
    for saved, live in zip(groups, optim.param_groups, strict=True):
        live.update({k: v for k, v in saved.items() if k != "params"})


def _load_by_name(
    key: str, optim: torch.optim.Optimizer, model: nn.Module, loaded: dict[str, Any]
) -> None:
    """optimizer.load_state_dict with parameter names mapped back to positions (torch's
    set_optimizer_state_dict, without its zero step over every parameter)."""
    names = param_names(model)
    order = [names[id(p)] for g in optim.param_groups for p in g["params"]]
    position = {name: i for i, name in enumerate(order)}
    unknown = [n for n in loaded["state"] if n not in position]
    if unknown:
        raise CheckpointMismatchError(
            f"optimizer {key!r}: the checkpoint has state for parameter {unknown[0]!r}, which "
            f"this optimizer does not update; restore into the optimizer that was saved."
        )
    groups = [dict(g, params=[position[n] for n in g["params"]]) for g in loaded["param_groups"]]
    state = {position[n]: v for n, v in loaded["state"].items()}
    optim.load_state_dict({"state": state, "param_groups": groups})


def _loaded_in_place(model: nn.Module, loaded: dict[str, Any]) -> bool:
    """True when every restored value already is the module's own tensor (DCP loaded into it)."""
    if needs_torch_optimizer_io(model) or any(_has_load_hooks(m) for m in model.modules()):
        return False
    live: dict[str, Any] = dict(get_model_state_dict(model))
    return live.keys() == loaded.keys() and all(
        _same_tensor(v, live[k]) for k, v in loaded.items()
    )


def _has_load_hooks(module: nn.Module) -> bool:
    """True when loading this module runs code beyond copying values (hooks, overrides)."""
    return bool(
        module._load_state_dict_pre_hooks
        or module._load_state_dict_post_hooks
        or type(module)._load_from_state_dict is not nn.Module._load_from_state_dict
    )


def _same_tensor(a: Any, b: Any) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.data_ptr() == b.data_ptr()
        and a.shape == b.shape
        and a.dtype == b.dtype
    )
