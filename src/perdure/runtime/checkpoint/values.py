"""Plain (non-tensor) state values: checked and encoded so that loading never unpickles code.

A plain value is loaded with ``torch.load(weights_only=True)``, so anything else is refused at
save time. NumPy arrays and scalars are encoded as tagged dicts of bytes and decoded exactly.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from perdure.runtime.checkpoint.errors import UnsupportedValueError

_TAG = "__perdure_type__"
_NUMPY = "numpy"
_SCALARS = (type(None), bool, int, float, complex, str, bytes)
PLAIN = frozenset((*_SCALARS, torch.Size, torch.dtype))  # what ``encode`` returns as it is
_KEY_TYPES = (type(None), bool, int, float, str)

ALLOWED = (
    "None, bool, int, float, complex, str, bytes, list, tuple, dict, torch.Size, torch.dtype, "
    "tensors, NumPy arrays and scalars"
)


def encode(value: Any, where: str) -> Any:
    """Return a copy of ``value`` that ``torch.load(weights_only=True)`` can rebuild exactly.

    Raises UnsupportedValueError naming ``where`` (the state key) when a value is not plain.
    Tensors inside plain values are cloned so that the snapshot does not change afterwards.
    """
    kind = type(value)
    if kind in PLAIN:
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, np.ndarray | np.generic):
        return _encode_numpy(value, where)
    if kind is list:
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if kind is tuple:
        if all(type(v) in PLAIN for v in value):  # immutable as it is (an optimizer's betas)
            return value
        return tuple(encode(v, f"{where}[{i}]") for i, v in enumerate(value))
    if kind is dict or kind is OrderedDict:
        out = OrderedDict() if kind is OrderedDict else {}
        for k, v in value.items():
            if type(k) not in _KEY_TYPES:
                raise UnsupportedValueError(
                    f"state value '{where}' has a dict key {k!r} of type {type(k).__name__}; "
                    "dict keys must be str, int, float, bool or None. Convert the key."
                )
            out[k] = encode(v, f"{where}.{k}")
        return out
    if callable(getattr(value, "state_dict", None)):
        raise UnsupportedValueError(
            f"state value '{where}' is a {kind.__qualname__} with state_dict(), nested inside "
            "another value; put it at the top level of the state dict, where the Checkpointer "
            "calls its state_dict() and load_state_dict()."
        )
    raise UnsupportedValueError(
        f"state value '{where}' has type {kind.__module__}.{kind.__qualname__}, which a "
        f"checkpoint cannot store without pickling code. Allowed plain values: {ALLOWED}; "
        "objects need state_dict() and load_state_dict() methods."
    )


def decode(value: Any) -> Any:
    """Undo ``encode``: rebuild NumPy values from their tagged form. No side effects."""
    kind = type(value)
    if kind is list:
        return [decode(v) for v in value]
    if kind is tuple:
        return tuple(decode(v) for v in value)
    if kind is dict or kind is OrderedDict:
        if value.get(_TAG) == _NUMPY and set(value) == {_TAG, "dtype", "shape", "data", "scalar"}:
            return _decode_numpy(value)
        return kind((k, decode(v)) for k, v in value.items())
    return value


def _encode_numpy(value: np.ndarray | np.generic, where: str) -> dict[str, Any]:
    array = np.asarray(value)
    if array.dtype.hasobject:
        raise UnsupportedValueError(
            f"state value '{where}' is a NumPy array of dtype object, which cannot be stored "
            "without pickling; convert it to a numeric array or a list."
        )
    return {
        _TAG: _NUMPY,
        "dtype": array.dtype.str,
        "shape": list(array.shape),
        "data": np.ascontiguousarray(array).tobytes(),
        "scalar": isinstance(value, np.generic),
    }


def _decode_numpy(value: dict[str, Any]) -> np.ndarray | np.generic:
    flat = np.frombuffer(value["data"], dtype=np.dtype(value["dtype"])).copy()
    array: np.ndarray = flat.reshape(tuple(value["shape"]))
    if value["scalar"]:
        scalar: np.generic = array.reshape(-1)[0]  # a NumPy scalar of the saved dtype
        return scalar
    return array
