"""A Checkpointer prepares a state whose layout repeats from what it kept of the last one (its
state dicts, its layout): what it prepares must equal a fresh preparation, whatever changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from perdure.runtime.checkpoint.errors import UnsupportedValueError
from perdure.runtime.checkpoint.prepared import Prepared, prepare
from perdure.runtime.checkpoint.tree import Flattener


def model_and_optim(hidden: int = 4, stepped: bool = True) -> tuple[nn.Module, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, hidden), nn.ReLU(), nn.Linear(hidden, 2))
    optim = torch.optim.AdamW(model.parameters(), lr=0.01)
    if stepped:
        model(torch.ones(2, 3)).sum().backward()
        optim.step()
    return model, optim


class Memo:
    """What a Checkpointer keeps between saves."""

    def __init__(self) -> None:
        self.flattener = Flattener()

    def prepare(self, state: dict[str, Any]) -> Prepared:
        prepared, problem = prepare(state, 0, deferred=True, flattener=self.flattener)
        if problem is not None:
            raise problem
        assert prepared is not None
        return prepared


def fresh(state: dict[str, Any]) -> Prepared:
    return Memo().prepare(state)


def assert_same(got: Prepared, expected: Prepared) -> None:
    assert got.signature == expected.signature
    assert list(got.flat) == list(expected.flat)
    assert list(got.paths.items()) == list(expected.paths.items())
    for fqn, value in expected.flat.items():
        mine = got.flat[fqn]
        assert type(mine) is type(value), fqn
        if isinstance(value, torch.Tensor):
            assert mine.data_ptr() == value.data_ptr() and mine.shape == value.shape, fqn
        else:
            assert mine == value, fqn


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
def test_a_kept_memory_prepares_what_a_fresh_one_does(change: str) -> None:
    model, optim = model_and_optim(stepped=change != "optimizer state appears after its first step")
    state: dict[str, Any] = {"model": model, "optim": optim, "step": 1, "lr": 0.1}
    memo = Memo()
    first = memo.prepare(state)
    assert_same(memo.prepare(state), fresh(state))  # a layout followed
    apply, changed = CHANGES[change]
    apply(state)
    got = memo.prepare(state)
    assert_same(got, fresh(state))
    assert (got.signature != first.signature) == changed
    assert_same(memo.prepare(state), fresh(state))  # and the new layout followed


def test_a_bad_value_is_refused_alike_where_a_layout_is_followed() -> None:
    model, optim = model_and_optim()
    memo = Memo()
    memo.prepare({"model": model, "optim": optim, "step": 1})
    bad = {"model": model, "optim": optim, "step": object()}
    with pytest.raises(UnsupportedValueError) as kept:
        memo.prepare(bad)
    with pytest.raises(UnsupportedValueError) as new:
        fresh(bad)
    assert str(kept.value) == str(new.value) and "'step'" in str(new.value)
