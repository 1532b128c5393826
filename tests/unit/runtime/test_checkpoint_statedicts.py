"""A Checkpointer saves what torch's distributed state dicts hold, named as torch names them
(no DDP or torch.compile prefix), and a module's state-dict hooks run at every save."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP

from perdure.runtime.checkpoint.state import fqn, param_names, state_tree


class Tied(nn.Module):
    """An embedding and an output layer sharing one weight, and a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.embed.weight
        self.register_buffer("scale", torch.ones(4))


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


@pytest.mark.parametrize("wrap", ["plain", "tied", "compiled", "ddp"])
def test_saved_names_are_torchs_without_wrapper_prefixes(
    wrap: str, request: pytest.FixtureRequest
) -> None:
    inner = Tied() if wrap == "tied" else mlp()
    if wrap == "ddp":
        request.getfixturevalue("world_of_one")
    model: nn.Module = {"compiled": lambda m: torch.compile(m), "ddp": DDP}.get(
        wrap, lambda m: m)(inner)
    optim = torch.optim.AdamW(model.parameters(), lr=0.01)
    saved = state_tree({"model": model, "optim": optim}, 0)
    assert list(saved["model"]) == list(get_model_state_dict(model))
    assert "module." not in "".join(saved["model"]) and "_orig_mod" not in "".join(saved["model"])
    names = param_names(model)
    assert [names[id(p)] for p in model.parameters()] == [n for n, _ in inner.named_parameters()]
    assert saved["optim"]["param_groups"][0]["params"] == list(names.values())


def test_a_state_dict_hook_runs_at_every_save() -> None:
    model = mlp()
    calls = torch.zeros(())

    def hook(module: nn.Module, sd: dict[str, Any], prefix: str, local: Any) -> None:
        calls.add_(1)
        sd[prefix + "calls"] = calls

    model.register_state_dict_post_hook(hook)  # type: ignore[no-untyped-call]
    for n in range(3):
        assert state_tree({"m": model}, 0)["m"]["calls"] is calls
        assert int(calls) == n + 1


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
        self.head = nn.Linear(4, 2)


def _wrapped() -> list[nn.Module]:
    net = _Net()
    compiled = torch.compile(_Net())
    inner = _Net()
    inner.body = torch.compile(inner.body)  # type: ignore[assignment]
    return [net, compiled, inner]


@pytest.mark.parametrize("model", _wrapped(), ids=["plain", "compiled", "compiled-part"])
def test_fqn_names_keys_as_torchs_state_dicts_do(model: nn.Module) -> None:
    expected = list(get_model_state_dict(model))
    assert sorted(fqn(model, k) for k in model.state_dict()) == sorted(expected)
