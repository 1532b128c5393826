"""The snapshot format round-trips every value a training state holds, without pickle."""

from __future__ import annotations

import io
import math

import pytest
import torch

from perdure.runtime.elastic.codec import encode, file_reader, read


def decode(payload: bytes) -> object:
    return read(file_reader(io.BytesIO(payload), "in memory"), len(payload))


def roundtrip(tree: object) -> object:
    return decode(b"".join(bytes(c) for c in encode(tree)))


def test_tensors_of_every_dtype_and_shape_come_back_equal() -> None:
    tree = {
        "f32": torch.randn(3, 5), "bf16": torch.randn(7).to(torch.bfloat16),
        "i64": torch.arange(4), "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 3),
        "strided": torch.arange(12.0).reshape(3, 4).t(),  # not contiguous
    }
    back = roundtrip(tree)
    assert isinstance(back, dict) and back.keys() == tree.keys()
    for key, t in tree.items():
        assert back[key].dtype == t.dtype and back[key].shape == t.shape
        assert torch.equal(back[key], t), key


def test_optimizer_state_keeps_int_keys_tuples_and_floats() -> None:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), betas=(0.9, 0.99))
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    sd = opt.state_dict()
    back = roundtrip({"optim": sd, "nan": math.nan, "inf": -math.inf, "none": None,
                      "odd": {"__t__": 1}})
    assert isinstance(back, dict)
    assert back["optim"]["param_groups"][0]["betas"] == (0.9, 0.99)
    assert set(back["optim"]["state"]) == {0, 1}
    fresh = torch.optim.Adam(model.parameters(), betas=(0.9, 0.99))
    fresh.load_state_dict(back["optim"])
    assert torch.equal(fresh.state_dict()["state"][0]["exp_avg"], sd["state"][0]["exp_avg"])
    assert math.isnan(back["nan"]) and back["inf"] == -math.inf and back["none"] is None
    assert back["odd"] == {"__t__": 1}  # a user's dict that looks like a marker stays a dict


def test_tensors_are_sent_as_views_not_copies() -> None:
    t = torch.randn(1000)
    chunks = encode({"w": t})
    assert any(c.nbytes == 4000 and c.obj is not None for c in chunks[1:])
    with torch.no_grad():
        t.add_(1.0)  # the chunk shows the change: it is the tensor's own memory
    back = decode(b"".join(bytes(c) for c in chunks))
    assert torch.equal(back["w"], t)  # type: ignore[index]


def test_garbage_and_truncation_are_refused() -> None:
    payload = b"".join(bytes(c) for c in encode({"w": torch.randn(100)}))
    with pytest.raises(ValueError, match="bad magic"):
        decode(b"x" * len(payload))
    with pytest.raises(ValueError, match="truncated"):
        decode(payload[:-64])


def test_unsupported_values_are_named() -> None:
    with pytest.raises(TypeError, match="cannot encode a set"):
        encode({"s": {1, 2}})
