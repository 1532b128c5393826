"""Flattened keys are DCP's own, and unflatten rebuilds the original types of dict keys."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint._nested_dict import flatten_state_dict

from perdure.runtime.checkpoint.tree import flatten, unflatten

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
