"""A training state as plain trees: capture it into reusable host buffers, put it back in place.

A state maps names to modules, optimizers, tensors, objects with `state_dict()` and
`load_state_dict()`, or plain values; a `RankLocal` value is captured like the value it wraps
but never broadcast.

Side effects: `apply` and `broadcast` write into the user's objects; `capture` only into its
buffers.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping
from typing import Any

import torch
from torch import nn

__all__ = ["Buffers", "apply", "broadcast", "capture", "check_state", "kind_of", "unwrap"]

_PLAIN = (int, float, str, bool, type(None))


def unwrap(value: Any) -> Any:
    """The value inside a RankLocal, or `value` itself."""
    from perdure.runtime.checkpoint import RankLocal  # not at import time: a cycle

    return value.value if isinstance(value, RankLocal) else value


def kind_of(value: Any) -> str:
    """module, tensor, stateful or value (of the value a RankLocal wraps). No side effects."""
    value = unwrap(value)
    if isinstance(value, nn.Module):
        return "module"
    if isinstance(value, torch.Tensor):
        return "tensor"
    if callable(getattr(value, "state_dict", None)) and callable(
        getattr(value, "load_state_dict", None)
    ):
        return "stateful"  # optimizers, samplers, schedulers
    return "value"


def _check_plain(value: Any, where: str) -> None:
    if isinstance(value, (*_PLAIN, torch.Tensor)):
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, _PLAIN):
                raise TypeError(f"state value {where} has a key {k!r} of type {type(k).__name__}")
            _check_plain(v, f"{where}[{k!r}]")
        return
    raise TypeError(
        f"state value {where} is a {type(value).__name__}; a state holds modules, optimizers, "
        "tensors, objects with state_dict()/load_state_dict(), or plain values (numbers, "
        "strings, lists, dicts). Wrap it in an object with state_dict() and load_state_dict()."
    )


def check_state(state: Mapping[str, Any]) -> Mapping[str, Any]:
    """Raise TypeError naming the first value that cannot be snapshotted; return `state`."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict of name -> value, got {type(state).__name__}")
    for key, value in state.items():
        if not isinstance(key, str):
            raise TypeError(f"state keys must be strings, got {key!r}")
        if kind_of(value) == "value":
            _check_plain(unwrap(value), repr(key))
    return state


class Buffers:
    """Host tensors reused across captures, matched by position, shape and dtype."""

    def __init__(self) -> None:
        self._tensors: list[torch.Tensor] = []
        self._next = 0
        self.nbytes = 0

    def start(self) -> None:
        self._next = 0
        self.nbytes = 0

    def copy(self, t: torch.Tensor) -> torch.Tensor:
        t = t.detach()
        i, self._next = self._next, self._next + 1
        if i < len(self._tensors):
            buf = self._tensors[i]
            if buf.shape != t.shape or buf.dtype != t.dtype:
                buf = self._tensors[i] = _host_like(t)
        else:
            buf = _host_like(t)
            self._tensors.append(buf)
        buf.copy_(t, non_blocking=t.is_cuda)
        self.nbytes += buf.numel() * buf.element_size()
        return buf


def _host_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=t.is_cuda)


def _copy_tree(value: Any, buffers: Buffers) -> Any:
    if isinstance(value, torch.Tensor):
        return buffers.copy(value)
    if isinstance(value, dict):
        return {k: _copy_tree(v, buffers) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_tree(v, buffers) for v in value]
    if isinstance(value, tuple):
        return tuple(_copy_tree(v, buffers) for v in value)
    return copy.deepcopy(value)


def capture(state: Mapping[str, Any], buffers: Buffers) -> dict[str, Any]:
    """This process's state as a tree of host tensors (in `buffers`) and plain values."""
    buffers.start()
    tree: dict[str, Any] = {}
    for key, wrapped in check_state(state).items():
        kind, value = kind_of(wrapped), unwrap(wrapped)
        if kind in ("module", "stateful"):
            tree[key] = _copy_tree(value.state_dict(), buffers)
        else:
            tree[key] = _copy_tree(value, buffers)
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # device-to-host copies were queued non-blocking
    return tree


def apply(state: MutableMapping[str, Any], tree: Mapping[str, Any]) -> None:
    """Load `tree` (from `capture`, possibly another process's) into `state` in place."""
    missing = sorted(set(state) - set(tree))
    if missing:
        raise KeyError(
            f"the snapshot has no value for state key(s) {missing} (it has {sorted(tree)}); "
            "save and load the same state keys"
        )
    for key, wrapped in state.items():
        kind, value = kind_of(wrapped), unwrap(wrapped)
        if kind in ("module", "stateful"):
            value.load_state_dict(tree[key])
        elif kind == "tensor":
            with torch.no_grad():
                value.copy_(tree[key])
        elif value is not wrapped:
            wrapped.value = copy.deepcopy(tree[key])
        else:
            state[key] = copy.deepcopy(tree[key])


def broadcast(state: MutableMapping[str, Any], src: int) -> None:
    """Make every rank's `state` (but its RankLocal values) rank `src`'s, in place."""
    import torch.distributed as dist

    check_state(state)
    me = dist.get_rank()
    tensors: list[torch.Tensor] = []
    objects: dict[str, Any] = {}
    shared = {k: v for k, v in state.items() if unwrap(v) is v}
    for key, value in shared.items():
        kind = kind_of(value)
        if kind == "module":
            tensors.extend(value.state_dict().values())
        elif kind == "tensor":
            tensors.append(value)
        elif me == src:
            objects[key] = value.state_dict() if kind == "stateful" else value
    box: list[Any] = [objects if me == src else None]
    dist.broadcast_object_list(box, src=src)
    if me != src:
        for key, obj in box[0].items():
            if kind_of(state[key]) == "stateful":
                state[key].load_state_dict(obj)
            else:
                state[key] = obj
    _broadcast_tensors(tensors, src)


def _broadcast_tensors(tensors: list[torch.Tensor], src: int) -> None:
    import torch.distributed as dist

    by_dtype: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault((t.dtype, t.device), []).append(t)
    with torch.no_grad():
        for same in by_dtype.values():
            flat = torch.cat([t.detach().reshape(-1) for t in same])
            dist.broadcast(flat, src=src)
            offset = 0
            for t in same:
                n = t.numel()
                t.copy_(flat[offset:offset + n].view_as(t))
                offset += n
