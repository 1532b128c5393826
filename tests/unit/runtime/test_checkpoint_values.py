"""Plain state values round-trip exactly through weights_only loading, or are refused."""

from __future__ import annotations

import io
import random
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from perdure.runtime.checkpoint.errors import UnsupportedValueError
from perdure.runtime.checkpoint.values import decode, encode


def roundtrip(value: Any) -> Any:
    buf = io.BytesIO()
    torch.save(encode(value, "v"), buf)
    buf.seek(0)
    return decode(torch.load(buf, weights_only=True))


@pytest.mark.parametrize(
    "value",
    [
        None, True, 7, 2.5, 1 + 2j, "text", b"\x00bytes",
        [1, [2, (3, None)]],
        {"a": 1, 2: "two", 2.5: [], None: {}, False: ()},
        OrderedDict(b=1, a=2),
        torch.Size([2, 3]),
        torch.float16,
        random.Random(5).getstate(),
    ],
)
def test_plain_values_round_trip(value: Any) -> None:
    back = roundtrip(value)
    assert back == value and type(back) is type(value)


def test_numpy_rng_state_and_scalars_round_trip_with_their_dtypes() -> None:
    state = np.random.RandomState(3).get_state()
    back: dict[str, Any] = roundtrip(
        {"np": state, "scalar": np.float32(1.5), "ints": np.arange(6).reshape(2, 3)}
    )
    assert back["np"][0] == "MT19937"
    assert back["np"][1].dtype == np.uint32
    assert np.array_equal(back["np"][1], state[1])  # type: ignore[index]
    assert tuple(back["np"][2:]) == tuple(state[2:])  # type: ignore[index]
    assert type(back["scalar"]) is np.float32 and back["scalar"] == np.float32(1.5)
    assert back["ints"].shape == (2, 3) and np.array_equal(back["ints"], np.arange(6).reshape(2, 3))


def test_tensors_inside_values_are_snapshots() -> None:
    live = torch.zeros(3)
    encoded = encode((live, 1), "v")
    live.add_(1)
    assert torch.equal(encoded[0], torch.zeros(3))


def test_a_tuple_of_scalars_is_kept_as_it_is() -> None:
    betas = (0.9, 0.999)
    assert encode(betas, "v") is betas  # immutable: a save reuses its bytes while it is kept
    nested = (0.9, (1, 2))
    assert encode(nested, "v") == nested and encode(nested, "v") is not nested


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"fn": print}, r"'v\.fn' has type builtins.builtin_function_or_method"),
        ({(1, 2): 3}, r"dict key \(1, 2\) of type tuple"),
        (np.array([object()], dtype=object), "dtype object"),
        ([nn.Linear(1, 1)], r"Linear with state_dict\(\), nested inside"),
        ({1, 2}, "has type builtins.set"),
    ],
)
def test_values_that_need_pickle_are_refused_with_the_key(value: Any, message: str) -> None:
    with pytest.raises(UnsupportedValueError, match=message):
        encode(value, "v")
