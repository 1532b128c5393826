"""A Checkpointer's state dicts: what torch's helpers return, save after save, with their
per-call work done once per layout (statedicts.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from perdure.runtime.checkpoint import statedicts
from perdure.runtime.checkpoint.state import tree_for_save
from perdure.runtime.checkpoint.statedicts import StateDicts, same


class Tied(nn.Module):
    """An embedding and an output layer sharing one weight, and a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.embed.weight
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(x) * self.scale)


@pytest.fixture
def world_of_one(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def train(model: nn.Module, optim: torch.optim.Optimizer, first: nn.Module) -> None:
    x = torch.randint(0, 10, (5,)) if isinstance(first, Tied) else torch.randn(5, 6)
    loss = model(x).pow(2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()


def counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often torch's helpers are asked, through statedicts."""
    calls = {"model": 0, "optimizer": 0}

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            calls[name] += 1
            return real(*args)

        return call

    monkeypatch.setattr(
        statedicts, "get_model_state_dict", counted("model", statedicts.get_model_state_dict)
    )
    monkeypatch.setattr(
        statedicts,
        "get_optimizer_state_dict",
        counted("optimizer", statedicts.get_optimizer_state_dict),
    )
    return calls


@pytest.mark.parametrize("wrap", ["plain", "tied", "compiled", "ddp"])
def test_save_after_save_the_state_dicts_are_torchs_and_torch_is_asked_once(
    wrap: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    inner = Tied() if wrap == "tied" else mlp()
    if wrap == "ddp":
        request.getfixturevalue("world_of_one")
    # (trained through the inner module: a compiled one would compile for seconds)
    model: nn.Module = {"compiled": lambda m: torch.compile(m), "ddp": DDP}.get(wrap, lambda m: m)(
        inner
    )
    optim = torch.optim.AdamW(model.parameters(), lr=0.01)
    state = {"model": model, "optim": optim, "step": 0}
    dicts = StateDicts()
    calls = counting(monkeypatch)
    for step in range(4):
        train(model if wrap == "ddp" else inner, optim, inner)
        state["step"] = step
        for group in optim.param_groups:
            group["lr"] = 0.01 / (step + 1)  # a scheduler's change shows at once
        assert same(tree_for_save(state, 0, dicts), tree_for_save(state, 0))
    assert calls == {"model": 1 + 4, "optimizer": 1 + 4}  # the learning save, then torch's own
    saved = tree_for_save(state, 0, dicts)
    assert saved["optim"]["param_groups"][0]["lr"] == 0.01 / 4
    assert "module." not in "".join(saved["model"]) and "_orig_mod" not in "".join(saved["model"])


def test_a_changed_layout_asks_torch_again(monkeypatch: pytest.MonkeyPatch) -> None:
    model = mlp()
    optim = torch.optim.Adam(model.parameters())
    train(model, optim, model)
    state = {"model": model, "optim": optim}
    dicts = StateDicts()
    tree_for_save(state, 0, dicts)
    calls = counting(monkeypatch)
    model.add_module("head", nn.Linear(3, 2))  # new keys: the module, then its optimizer
    optim.add_param_group({"params": list(model.head.parameters())})
    train(model, optim, model)
    assert same(tree_for_save(state, 0, dicts), tree_for_save(state, 0))
    assert calls == {"model": 2, "optimizer": 2}
    optim.param_groups[1]["params"] = [model.head.weight]  # same module, other parameters
    optim.state.pop(model.head.bias)
    assert same(tree_for_save(state, 0, dicts), tree_for_save(state, 0))
    assert calls == {"model": 3, "optimizer": 4}


def test_a_state_dict_hook_runs_at_every_save(monkeypatch: pytest.MonkeyPatch) -> None:
    model = mlp()
    calls = torch.zeros(())

    def hook(module: nn.Module, sd: dict[str, Any], prefix: str, local: Any) -> None:
        calls.add_(1)
        sd[prefix + "calls"] = calls

    model.register_state_dict_post_hook(hook)  # type: ignore[no-untyped-call]
    dicts = StateDicts()
    asked = counting(monkeypatch)
    for _ in range(3):
        assert same(tree_for_save({"m": model}, 0, dicts), tree_for_save({"m": model}, 0))
    assert asked["model"] == 1 + 3
    before = int(calls)
    assert tree_for_save({"m": model}, 0, dicts)["m"]["calls"] is calls
    assert int(calls) == before + 1


def test_same_tells_apart_what_saves_differently() -> None:
    t = torch.arange(6.0)
    assert same({"a": t, "b": [1, (2.0, None)]}, {"a": t.detach(), "b": [1, (2.0, None)]})
    assert not same({"a": t}, {"a": t.clone()})  # another storage
    assert not same({"a": t}, {"a": t.view(2, 3)})  # another shape
    assert not same({"a": 1, "b": 2}, {"b": 2, "a": 1})  # another order
    assert not same([1], [True]) and not same([1], [1.0])  # torch.save writes these apart
