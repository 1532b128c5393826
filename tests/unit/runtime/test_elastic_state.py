"""Capturing a training state into reusable host buffers and putting it back in place."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from perdure.runtime.checkpoint import RankLocal
from perdure.runtime.data import ElasticSampler
from perdure.runtime.elastic.state import Buffers, apply, capture, check_state


def make_state() -> dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()  # momentum buffers exist
    sampler = ElasticSampler(100, 4, seed=3, rank=0, world_size=2)
    sampler.set_position(1, 40)
    return {"model": model, "optim": opt, "sampler": sampler, "step": 7,
            "meta": {"lr": [0.1, 0.01]}, "ema": torch.ones(3)}


def test_apply_puts_back_exactly_what_capture_took() -> None:
    state = make_state()
    before = [p.clone() for p in state["model"].parameters()]
    momentum = [state["optim"].state[p]["momentum_buffer"].clone()
                for p in state["model"].parameters()]
    tree = capture(state, Buffers())
    with torch.no_grad():
        for p in state["model"].parameters():
            p.add_(1.0)
    state["model"](torch.randn(2, 4)).sum().backward()
    state["optim"].step()
    state["sampler"].set_position(2, 0)
    state["step"], state["meta"]["lr"][0] = 99, 5.0
    state["ema"].zero_()
    apply(state, tree)
    assert all(torch.equal(a, b) for a, b in zip(before, state["model"].parameters(),
                                                  strict=True))
    after = [state["optim"].state[p]["momentum_buffer"] for p in state["model"].parameters()]
    assert all(torch.equal(a, b) for a, b in zip(momentum, after, strict=True))
    assert (state["sampler"].epoch, state["sampler"].cursor) == (1, 40)
    assert state["step"] == 7 and state["meta"] == {"lr": [0.1, 0.01]}
    assert torch.equal(state["ema"], torch.ones(3))


def test_the_copy_does_not_alias_the_live_state() -> None:
    state = make_state()
    tree = capture(state, Buffers())
    with torch.no_grad():
        state["ema"].fill_(5.0)
    assert torch.equal(tree["ema"], torch.ones(3))


def test_buffers_are_reused_when_shapes_match() -> None:
    state = make_state()
    buffers = Buffers()
    first = capture(state, buffers)
    ptrs = [t.data_ptr() for t in first["model"].values()]
    second = capture(state, buffers)
    assert [t.data_ptr() for t in second["model"].values()] == ptrs
    assert buffers.nbytes == sum(t.numel() * 4 for t in second["model"].values()) + sum(
        t.numel() * t.element_size() for t in [second["ema"], *_optim_tensors(second)])


def _optim_tensors(tree: dict[str, Any]) -> list[torch.Tensor]:
    return [v for s in tree["optim"]["state"].values() for v in s.values()
            if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize(("value", "says"), [
    ({1, 2}, "'bad' is a set"),
    (lambda: 1, "'bad' is a function"),
    ({"x": object()}, r"'bad'\['x'\] is a object"),
])
def test_unsupported_values_are_named(value: object, says: str) -> None:
    with pytest.raises(TypeError, match=says):
        check_state({"bad": value})


class Counter:
    """A per-rank stateful value (like an RNG): state_dict() / load_state_dict()."""

    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict[str, int]:
        return {"n": self.n}

    def load_state_dict(self, sd: dict[str, int]) -> None:
        self.n = sd["n"]


def test_rank_local_values_are_snapshotted_like_what_they_wrap() -> None:
    counter, plain = RankLocal(Counter()), RankLocal({"seen": [1, 2]})
    state = {"rng": counter, "cursor": plain}
    counter.value.n = 5
    tree = capture(state, Buffers())
    counter.value.n, plain.value = 9, {"seen": []}
    apply(state, tree)
    assert state["rng"] is counter and counter.value.n == 5  # restored in place
    assert state["cursor"] is plain and plain.value == {"seen": [1, 2]}


def test_a_snapshot_without_a_key_names_it() -> None:
    state = make_state()
    tree = capture({"model": state["model"]}, Buffers())
    with pytest.raises(KeyError, match="'optim'"):
        apply(state, tree)
