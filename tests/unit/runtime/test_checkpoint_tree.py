"""Flattened keys are DCP's own, unflatten rebuilds the original types of dict keys, and a
Flattener that follows the last layout gives exactly what flatten gives."""

from __future__ import annotations

from collections import OrderedDict
from types import MappingProxyType
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint._nested_dict import flatten_state_dict

from perdure.runtime.checkpoint import tree
from perdure.runtime.checkpoint.tree import Flattener, flatten, unflatten

NESTED: dict[str, Any] = {
    "model": {"fc.weight": torch.ones(2), "fc.bias": torch.zeros(2)},
    "optim": {
        "state": {"fc.weight": {"step": torch.tensor(3.0), "exp_avg": torch.ones(2)}},
        "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": ["fc.weight", "fc.bias"]}],
    },
    "step": 5,
    "rng": {"python": (3, (1, 2), None), "torch": torch.arange(3)},
    "lists": [[torch.ones(1)], [1, 2]],
}


def test_keys_match_torch_dcp_flattening() -> None:
    flat, _ = flatten(NESTED)
    dcp_flat, _ = flatten_state_dict(NESTED)
    assert list(flat) == list(dcp_flat)
    assert "optim.param_groups.0.lr" in flat and "rng.python" in flat


def test_unflatten_restores_nesting_lists_and_key_types() -> None:
    tree = {"loader": {0: "a", "1": "b", 2.5: [{"x": torch.ones(1)}], "empty": {}}}
    flat, paths = flatten(tree)
    assert "loader.empty" in flat  # an empty dict is kept, not dropped
    back = unflatten(flat, paths)
    assert set(back["loader"]) == {0, "1", 2.5, "empty"}
    assert back["loader"][0] == "a" and back["loader"]["empty"] == {}
    assert torch.equal(back["loader"][2.5][0]["x"], torch.ones(1))


def test_keys_that_collide_after_flattening_are_refused() -> None:
    try:
        flatten({"a": {1: 1, "1": 2}})
    except ValueError as exc:
        assert "both flatten to 'a.1'" in str(exc)
    else:
        raise AssertionError("colliding keys were accepted")


def tree_of(**changes: Any) -> dict[str, Any]:
    """A state tree like a save's (a model, an optimizer, plain values), with ``changes``."""
    base: dict[str, Any] = {
        "model": {"fc.weight": torch.ones(2), "fc.bias": torch.zeros(2)},
        "optim": {"state": {"fc.weight": {"step": torch.tensor(1.0), "exp_avg": torch.ones(2)}},
                  "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": ["fc.weight"]}]},
        "data": data(),
        "step": 5,
    }
    base.update(changes)
    return base


def data(*pairs: tuple[Any, Any]) -> OrderedDict[Any, Any]:
    """A loader's state dict, with ``pairs`` changed."""
    return OrderedDict([("epoch", 0), ("cursor", 16), ("empty", {}), ("order", [1, 2]),
                        (1, "int key"), ("mixed", [torch.ones(1), 2]), *pairs])


# Each is a layout change (or none) from tree_of(): the Flattener must still give flatten's.
CHANGES: dict[str, dict[str, Any]] = {
    "same layout, new values": {"step": 6, "data": data(("cursor", 0), ("order", [2, 1]))},
    "a new key": {"extra": 1},
    "a key gone": {"model": {"fc.weight": torch.ones(2)}},
    "keys reordered": {"model": {"fc.bias": torch.zeros(2), "fc.weight": torch.ones(2)}},
    "a new parameter": {"model": {"fc.weight": torch.ones(2), "fc.bias": torch.zeros(2),
                                  "out.weight": torch.ones(1)}},
    "optimizer state appears": {"optim": {"state": {}, "param_groups": [{"lr": 0.1}]}},
    "a leaf becomes a dict": {"step": {"n": 5}},
    "a dict becomes a leaf": {"model": 3},
    "an empty dict fills": {"data": data(("empty", {"a": 1}))},
    "a plain list gets a tensor": {"data": data(("order", [torch.ones(1)]))},
    "a plain list gets a dict": {"data": data(("order", [1, {}]))},
    "a list loses its tensor": {"data": data(("mixed", [1, 2]))},
    "a dict becomes an OrderedDict": {"model": OrderedDict(
        [("fc.weight", torch.ones(2)), ("fc.bias", torch.zeros(2))])},
    "an equal key of another type (True)": {"data": OrderedDict(
        [("epoch", 0), ("cursor", 16), ("empty", {}), ("order", [1, 2]), (True, "int key")])},
    "an equal key of another type (1.0)": {"data": OrderedDict(
        [("epoch", 0), ("cursor", 16), ("empty", {}), ("order", [1, 2]), (1.0, "int key")])},
    "a str key that equals but is another object": {"model": {
        "".join(["fc.", "weight"]): torch.ones(2), "fc.bias": torch.zeros(2)}},
    "a tensor becomes a value": {"model": {"fc.weight": 1.0, "fc.bias": torch.zeros(2)}},
    "a mapping of another type": {"model": MappingProxyType({"fc.weight": torch.ones(2)})},
}


@pytest.mark.parametrize("change", CHANGES)
def test_the_flattener_gives_flattens_result_whatever_changed(change: str) -> None:
    flattener = Flattener()
    flattener.flatten(tree_of())
    changed = tree_of(**CHANGES[change])
    got, expected = flattener.flatten(changed), flatten(changed)
    assert list(got[0]) == list(expected[0])  # keys, in order
    assert all(got[0][k] is v for k, v in expected[0].items())  # the same leaves
    assert list(got[1].items()) == list(expected[1].items())
    for fqn, path in expected[1].items():  # keys of the same types (1, True and 1.0 are equal)
        assert [type(k) for _, k in got[1][fqn]] == [type(k) for _, k in path]
    again = tree_of(**CHANGES[change])
    assert flattener.flatten(again)[1] == flatten(again)[1]  # and follows the new layout


def test_the_flattener_follows_a_repeated_layout_without_walking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flattener = Flattener()
    flattener.flatten(tree_of())
    monkeypatch.setattr(tree, "_walk", None)  # a walk would fail
    flat, _ = flattener.flatten(tree_of(step=7))
    assert flat["step"] == 7 and "optim.param_groups.0.betas" in flat
