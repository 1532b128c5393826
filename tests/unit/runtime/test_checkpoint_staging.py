"""Deferred staging: optimizer-owned tensors are copied in the background, the optimizer's next
step waits for the copy, and any other in-place change before the copy fails the save."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from perdure.runtime.checkpoint import Checkpointer, CheckpointError, staging
from perdure.runtime.checkpoint.comm import Comm
from perdure.runtime.checkpoint.plan import make_plan
from perdure.runtime.checkpoint.staging import (
    HostBuffers,
    StepGate,
    copy_pending,
    optimizer_storages,
)
from perdure.runtime.checkpoint.state import state_tree
from perdure.runtime.checkpoint.tree import flatten


@pytest.fixture
def deferring(monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies as small as these tests' are deferred too (else they are made in save())."""
    monkeypatch.setattr(staging, "DEFER_MIN_BYTES", 0)


def trained() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 2))
    optim = torch.optim.Adam(model.parameters(), lr=0.1)
    step(model, optim)
    return model, optim


def step(model: nn.Module, optim: torch.optim.Optimizer) -> None:
    loss = model(torch.randn(4, 8)).pow(2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()


def staged(state: dict[str, Any]) -> tuple[HostBuffers, Any, Any]:
    flat, paths = flatten(state_tree(state, 0))
    plan = make_plan(flat, paths, (), "t", Comm(60))
    buffers = HostBuffers(plan.items, shared=False, pin=False)
    _, defer = optimizer_storages(state)
    items, pending = buffers.stage(flat, defer)
    return buffers, items, pending


def test_only_optimizer_owned_tensors_are_deferred(deferring: None) -> None:
    model, optim = trained()
    _, _, pending = staged({"model": model, "optim": optim})
    deferred = {p.fqn for p in pending}
    params = {f"model.{n}" for n, _ in model.named_parameters()}
    assert params <= deferred  # parameters and Adam's moments wait for the optimizer
    assert any(f.startswith("optim.state.") and f.endswith("exp_avg") for f in deferred)
    assert not any("running_mean" in f for f in deferred)  # forward changes buffers: copied now


def test_a_change_outside_the_optimizer_before_the_copy_fails_loudly(deferring: None) -> None:
    model, optim = trained()
    _, _, pending = staged({"model": model, "optim": optim})
    with torch.no_grad():
        model[0].weight.mul_(2.0)  # e.g. a manual weight change between save() and step()
    with pytest.raises(CheckpointError, match=r"'model\.0\.weight' was changed in place between "
                       r"save\(\) and the optimizer's next step"):
        copy_pending(pending)


def test_the_optimizer_step_waits_for_the_gate() -> None:
    model, optim = trained()
    gate = StepGate([optim])
    stepped = threading.Event()

    def train() -> None:
        step(model, optim)
        stepped.set()

    worker = threading.Thread(target=train)
    worker.start()
    assert not stepped.wait(0.3)  # held at optimizer.step()
    gate.open()
    assert stepped.wait(10)
    worker.join()
    gate.remove()
    assert gate.waited_s > 0.2
    step(model, optim)  # removed: steps freely


@pytest.mark.parametrize("copies", ["deferred", "made in save"])
def test_a_save_then_training_right_away_stores_the_step_it_was_given(
    tmp_path: Path, copies: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if copies == "deferred":
        monkeypatch.setattr(staging, "DEFER_MIN_BYTES", 0)
    model, optim = trained()
    ckpt = Checkpointer(tmp_path)
    ckpt.save(1, {"model": model, "optim": optim})
    gate = ckpt._runner.inflight.gate if ckpt._runner.inflight is not None else None
    assert (gate is not None) == (copies == "deferred")  # small copies are not worth a thread
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    for _ in range(3):
        step(model, optim)  # the first waits at the gate until the copies are made
    ckpt.wait()
    assert ckpt.last_save is not None
    assert ("step_wait_s" in ckpt.last_save.extra) == (copies == "deferred")
    fresh, fresh_optim = trained()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    assert Checkpointer(tmp_path).restore_latest({"model": fresh, "optim": fresh_optim}) == 1
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, expected[key]), key


def test_sync_staging_defers_nothing(tmp_path: Path) -> None:
    model, optim = trained()
    ckpt = Checkpointer(tmp_path, stage="sync")
    ckpt.save(1, {"model": model, "optim": optim})
    assert ckpt._runner.inflight is None or ckpt._runner.inflight.gate is None
    ckpt.close()
    with pytest.raises(ValueError, match="stage is 'lazy'; it must be one of"):
        Checkpointer(tmp_path, stage="lazy")


def test_plain_values_are_serialised_as_they_are_at_each_save() -> None:
    model, optim = trained()
    state: dict[str, Any] = {"model": model, "optim": optim, "step": 3, "flag": True,
                             "scale": 0.0, "shape": (2, 3.5)}
    flat, paths = flatten(state_tree(state, 0))
    plan = make_plan(flat, paths, (), "t", Comm(60))
    buffers = HostBuffers(plan.items, shared=False, pin=False)

    def plain(flat: dict[str, Any]) -> dict[str, bytes]:
        items, _ = buffers.stage(flat)
        return {e.item.index.fqn: e.data for e in items if e.data is not None}

    first, again = plain(flat), plain(dict(flat))
    assert first.keys() == again.keys() and len(first) > 4  # lr, betas, ... step, flag
    assert again == first
    # Values torch.save writes differently: 1 for True, -0.0 for 0.0, ...
    changed = {**flat, "flag": 1, "scale": -0.0, "shape": (2, 3.25), "step": 4}
    third = plain(changed)
    for fqn in ("flag", "scale", "shape", "step"):
        assert third[fqn] != first[fqn]
        loaded = torch.load(io.BytesIO(third[fqn]), weights_only=True)
        assert type(loaded) is type(changed[fqn]) and repr(loaded) == repr(changed[fqn])
    assert all(third[fqn] == first[fqn] for fqn in first if "param_groups" in fqn)


def raw(tensor: torch.Tensor) -> tuple[torch.dtype, list[int], bytes]:
    flat = tensor.detach().contiguous().reshape(-1)
    return tensor.dtype, list(tensor.shape), bytes(flat.view(torch.uint8).numpy())


@pytest.mark.parametrize("shared", [False, True])
def test_staged_bytes_are_the_live_tensors_of_any_dtype_and_layout(shared: bool) -> None:
    values: dict[str, torch.Tensor] = {
        "f32": torch.randn(4, 3), "bf16": torch.randn(5).to(torch.bfloat16),
        "i64": torch.arange(6), "bool": torch.tensor([True, False]),
        "f64": torch.randn(2, dtype=torch.float64), "scalar": torch.tensor(3.5),
        "transposed": torch.randn(3, 4).t(), "column": torch.randn(3, 4)[:, 1],
        "grad": torch.randn(2, requires_grad=True), "param": nn.Parameter(torch.randn(2)),
        "empty": torch.zeros(0),
    }
    flat, paths = flatten(state_tree({"t": values, "step": 3}, 0))
    plan = make_plan(flat, paths, (), "t", Comm(60))
    buffers = HostBuffers(plan.items, shared=shared, pin=False)
    try:
        for live in (flat, {**flat, "t.f32": torch.full((4, 3), 2.0)}):  # a tensor replaced
            items, pending = buffers.stage(live)
            assert not pending and len(items) == len(plan.items)
            tensors = {e.item.index.fqn: e.tensor for e in items if e.tensor is not None}
            assert tensors.keys() == {f"t.{k}" for k in values}
            for fqn, copy in tensors.items():
                assert raw(copy) == raw(live[fqn]), fqn
                assert copy.grad_fn is None and not copy.requires_grad
    finally:
        buffers.close()


def test_a_plain_value_changed_in_place_is_saved_as_it_is_now() -> None:
    order, lr, size = [1, 2], 0.5, int("4000")
    inside = ([1],)  # a tuple, but a list inside
    flat, paths = flatten({"order": order, "lr": lr, "size": size, "inside": inside,
                           "t": torch.ones(2)})
    plan = make_plan(flat, paths, (), "t", Comm(60))
    buffers = HostBuffers(plan.items, shared=False, pin=False)

    def plain() -> dict[str, bytes]:
        items, _ = buffers.stage(flat)
        return {e.item.index.fqn: e.data for e in items if e.data is not None}

    first = plain()
    order.append(3)  # the same list object, changed
    inside[0].append(2)
    flat["size"] = int("4000")  # an equal int, another object
    again = plain()
    assert torch.load(io.BytesIO(again["order"]), weights_only=True) == [1, 2, 3]
    assert torch.load(io.BytesIO(again["inside"]), weights_only=True) == ([1, 2],)
    assert again["lr"] == first["lr"] and again["size"] == first["size"]
