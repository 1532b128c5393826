"""The snapshot wire and file format: a JSON header, then the raw bytes of every tensor.

No side effects, and no pickle. Layout: b"PDSNAP01", the 8-byte little-endian header length,
the JSON header (the tree, with tensors as {"__t__": i}, dicts with non-string keys as
{"__d__": [[k, v], ...]}, tuples as {"__tuple__": [...]}; and each tensor's dtype, shape and
offset), then each tensor's bytes at a 64-byte aligned offset.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["encode", "file_reader", "read", "tensor_paths"]

MAGIC = b"PDSNAP01"
_ALIGN = 64
_LEN = struct.Struct("<Q")
_MARKERS = ("__t__", "__d__", "__tuple__")
Path = tuple[Any, ...]
ReadInto = Callable[[memoryview], None]  # fills the whole view, or raises
Target = Callable[[Path, torch.dtype, tuple[int, ...]], "torch.Tensor | None"]


def _pad(n: int) -> int:
    return -n % _ALIGN


def _bytes_of(t: torch.Tensor) -> memoryview:
    return t.reshape(-1).view(torch.uint8).numpy().data if t.numel() else memoryview(
        bytearray())


def encode(tree: Any) -> list[memoryview]:
    """The chunks of `tree`'s encoding, in order (their total length is the payload size)."""
    tensors: list[dict[str, Any]] = []
    views: list[memoryview] = []
    offset = 0

    def value(v: Any) -> Any:
        nonlocal offset
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            tensors.append({"dtype": str(t.dtype).removeprefix("torch."),
                            "shape": list(t.shape), "offset": offset})
            views.append(_bytes_of(t))
            offset += views[-1].nbytes + _pad(views[-1].nbytes)
            return {"__t__": len(tensors) - 1}
        if isinstance(v, dict):
            if all(isinstance(k, str) and k not in _MARKERS for k in v):
                return {k: value(x) for k, x in v.items()}
            return {"__d__": [[value(k), value(x)] for k, x in v.items()]}
        if isinstance(v, list):
            return [value(x) for x in v]
        if isinstance(v, tuple):
            return {"__tuple__": [value(x) for x in v]}
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        raise TypeError(f"cannot encode a {type(v).__name__} in a snapshot: {v!r}")

    header = json.dumps({"tree": value(tree), "tensors": tensors, "size": offset}).encode()
    header += b" " * _pad(len(MAGIC) + _LEN.size + len(header))
    chunks = [memoryview(MAGIC + _LEN.pack(len(header)) + header)]
    for view in views:
        chunks.append(view)
        if _pad(view.nbytes):
            chunks.append(memoryview(bytes(_pad(view.nbytes))))
    return chunks


def tensor_paths(tree: Any, path: Path = ()) -> dict[Path, torch.Tensor]:
    """Every tensor of a live tree by its path, as `read` names them for its target."""
    out: dict[Path, torch.Tensor] = {}
    if isinstance(tree, torch.Tensor):
        out[path] = tree
    elif isinstance(tree, dict):
        for k, x in tree.items():
            out.update(tensor_paths(x, (*path, k)))
    elif isinstance(tree, (list, tuple)):
        for i, x in enumerate(tree):
            out.update(tensor_paths(x, (*path, i)))
    return out


def read(read_into: ReadInto, size: int, target: Target | None = None) -> Any:
    """Decode a snapshot of `size` bytes, each tensor read into `target(path, dtype, shape)`
    or a new tensor. A stream cut short raises (targets are then partly overwritten)."""
    prefix = bytearray(len(MAGIC) + _LEN.size)
    read_into(memoryview(prefix))
    if bytes(prefix[:len(MAGIC)]) != MAGIC:
        raise ValueError("not a perdure snapshot (bad magic); it was written by something else")
    (n,) = _LEN.unpack_from(prefix, len(MAGIC))
    header = bytearray(n)
    read_into(memoryview(header))
    doc = json.loads(bytes(header))
    start = consumed = len(prefix) + n
    if size < start + int(doc["size"]):
        raise ValueError(f"snapshot is truncated: {size} bytes of {start + doc['size']}")

    def skip(n: int) -> None:
        if n > 0:
            read_into(memoryview(bytearray(n)))  # alignment padding

    def tensor(i: int, path: Path) -> torch.Tensor:
        # the encoder numbers tensors in the order the tree is walked: that of the stream
        nonlocal consumed
        spec = doc["tensors"][i]
        dtype, shape = getattr(torch, spec["dtype"]), tuple(int(d) for d in spec["shape"])
        skip(start + int(spec["offset"]) - consumed)
        dst = target(path, dtype, shape) if target else None
        if dst is None:
            dst = torch.empty(shape, dtype=dtype)
        view = _bytes_of(dst.detach())
        read_into(view)
        consumed = start + int(spec["offset"]) + view.nbytes
        return dst

    def value(v: Any, path: Path) -> Any:
        if isinstance(v, list):
            return [value(x, (*path, i)) for i, x in enumerate(v)]
        if not isinstance(v, dict):
            return v
        if "__t__" in v:
            return tensor(int(v["__t__"]), path)
        if "__d__" in v:
            out = {}
            for k, x in v["__d__"]:
                key = value(k, ())
                out[key] = value(x, (*path, key))
            return out
        if "__tuple__" in v:
            return tuple(value(x, (*path, i)) for i, x in enumerate(v["__tuple__"]))
        return {k: value(x, (*path, k)) for k, x in v.items()}

    tree = value(doc["tree"], ())
    skip(size - consumed)
    return tree


def file_reader(f: io.BufferedIOBase, name: str) -> ReadInto:
    """A `ReadInto` over a buffered binary file (its readinto fills a view unless at the end)."""

    def read_into(view: memoryview) -> None:
        if f.readinto(view) != view.nbytes:
            raise ValueError(f"snapshot {name} is truncated")

    return read_into
