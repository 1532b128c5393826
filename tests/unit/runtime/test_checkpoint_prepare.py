"""A prepared state's signature changes exactly when its layout does (a changed signature
plans again), and a value a checkpoint cannot hold is refused naming its key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from perdure.runtime.checkpoint.errors import UnsupportedValueError
from perdure.runtime.checkpoint.plan import Prepared, prepare


def model_and_optim(hidden: int = 4, stepped: bool = True) -> tuple[nn.Module, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, hidden), nn.ReLU(), nn.Linear(hidden, 2))
    optim = torch.optim.AdamW(model.parameters(), lr=0.01)
    if stepped:
        model(torch.ones(2, 3)).sum().backward()
        optim.step()
    return model, optim


def prepared(state: dict[str, Any]) -> Prepared:
    got, problem = prepare(state, 0)
    if problem is not None:
        raise problem
    assert got is not None
    return got


def grow(state: dict[str, Any]) -> None:
    state["model"], state["optim"] = model_and_optim(hidden=5)


def swap_module(state: dict[str, Any]) -> None:
    state["model"], state["optim"] = model_and_optim()  # same class and shapes, new objects


def first_step(state: dict[str, Any]) -> None:
    model, optim = state["model"], state["optim"]
    model(torch.ones(2, 3)).sum().backward()
    optim.step()


def replace_tensor(state: dict[str, Any]) -> None:
    optim = state["optim"]
    per_param = optim.state[optim.param_groups[0]["params"][0]]
    per_param["exp_avg"] = torch.full_like(per_param["exp_avg"], 7.0)


CHANGES: dict[str, tuple[Callable[[dict[str, Any]], None], bool]] = {
    # what changes between two saves -> (the change, whether the layout changed)
    "nothing but values": (lambda s: s.update(step=2, lr=0.5), False),
    "a new key": (lambda s: s.update(extra=torch.ones(2)), True),
    "a new parameter": (grow, True),
    "optimizer state appears after its first step": (first_step, True),
    "a value becomes a tensor": (lambda s: s.update(step=torch.tensor(2)), True),
    "a value changes type": (lambda s: s.update(step=2.0), False),  # "b" either way
    "a tensor replaced by another of the same shape": (replace_tensor, False),
    "a module swapped for an equal one": (swap_module, False),
    "an optimizer's hyperparameter changes type": (
        lambda s: s["optim"].param_groups[0].update(lr=torch.tensor(0.1)), True),
}


@pytest.mark.parametrize("change", CHANGES)
def test_the_signature_changes_with_the_layout_only(change: str) -> None:
    model, optim = model_and_optim(stepped=change != "optimizer state appears after its first step")
    state: dict[str, Any] = {"model": model, "optim": optim, "step": 1, "lr": 0.1}
    first = prepared(state)
    apply, changed = CHANGES[change]
    apply(state)
    assert (prepared(state).signature != first.signature) == changed


def test_a_bad_value_is_refused_naming_its_key() -> None:
    model, optim = model_and_optim()
    with pytest.raises(UnsupportedValueError) as refused:
        prepared({"model": model, "optim": optim, "step": object()})
    assert "'step'" in str(refused.value)
