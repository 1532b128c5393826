"""The snapshot wire and file format: a JSON header, then the raw bytes of every tensor.

No side effects. `encode` returns the header and memoryviews of the tensors themselves, so a
snapshot is written to a file or a socket without being copied into one big buffer first (and
without pickle: the header is JSON). `read` decodes from a stream (a socket, a file) straight
into the training state's own tensors where the caller names them, so a restore allocates (and
page-faults) no memory for them; `state.apply` then puts the rest in place.

Layout: b"PDSNAP01", 8-byte little-endian header length, the header (JSON, padded to 64
bytes), then each tensor's bytes at a 64-byte aligned offset. The header holds the tree, with
each tensor replaced by {"__t__": i}, dicts whose keys are not all strings as
{"__d__": [[key, value], ...]}, tuples as {"__tuple__": [...]}, and the tensors' dtype, shape
and offset.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["MAGIC", "decode", "encode", "read", "tensor_paths"]

MAGIC = b"PDSNAP01"
_ALIGN = 64
_LEN = struct.Struct("<Q")
_MARKERS = ("__t__", "__d__", "__tuple__")


def _pad(n: int) -> int:
    return -n % _ALIGN


class _Encoder:
    def __init__(self) -> None:
        self.tensors: list[dict[str, Any]] = []
        self.views: list[memoryview] = []
        self.offset = 0

    def value(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if isinstance(v, dict):
            if all(isinstance(k, str) and k not in _MARKERS for k in v):
                return {k: self.value(x) for k, x in v.items()}
            return {"__d__": [[self.value(k), self.value(x)] for k, x in v.items()]}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, tuple):
            return {"__tuple__": [self.value(x) for x in v]}
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        raise TypeError(f"cannot encode a {type(v).__name__} in a snapshot: {v!r}")

    def tensor(self, t: torch.Tensor) -> dict[str, int]:
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().data if t.numel() else memoryview(b"")
        self.tensors.append({"dtype": str(t.dtype).removeprefix("torch."),
                             "shape": list(t.shape), "offset": self.offset})
        self.views.append(raw)
        self.offset += raw.nbytes + _pad(raw.nbytes)
        return {"__t__": len(self.tensors) - 1}


def encode(tree: Any) -> list[memoryview]:
    """The chunks of `tree`'s encoding, in order (their total length is the payload size)."""
    enc = _Encoder()
    doc = json.dumps({"tree": enc.value(tree), "tensors": enc.tensors, "size": enc.offset})
    header = doc.encode()
    header += b" " * _pad(len(MAGIC) + _LEN.size + len(header))
    chunks = [memoryview(MAGIC + _LEN.pack(len(header)) + header)]
    for view in enc.views:
        chunks.append(view)
        if _pad(view.nbytes):
            chunks.append(memoryview(bytes(_pad(view.nbytes))))
    return chunks


def _decode_value(v: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(v, list):
        return [_decode_value(x, tensors) for x in v]
    if isinstance(v, dict):
        if "__t__" in v:
            return tensors[int(v["__t__"])]
        if "__d__" in v:
            return {_decode_value(k, tensors): _decode_value(x, tensors) for k, x in v["__d__"]}
        if "__tuple__" in v:
            return tuple(_decode_value(x, tensors) for x in v["__tuple__"])
        return {k: _decode_value(x, tensors) for k, x in v.items()}
    return v


Path = tuple[Any, ...]


def _tensor_paths(v: Any, path: Path, out: dict[int, Path]) -> None:
    """Where each tensor of an encoded tree sits: index -> keys from the root."""
    if isinstance(v, list):
        for i, x in enumerate(v):
            _tensor_paths(x, (*path, i), out)
    elif isinstance(v, dict):
        if "__t__" in v:
            out[int(v["__t__"])] = path
        elif "__d__" in v:
            for k, x in v["__d__"]:
                _tensor_paths(x, (*path, _decode_value(k, [])), out)
        elif "__tuple__" in v:
            for i, x in enumerate(v["__tuple__"]):
                _tensor_paths(x, (*path, i), out)
        else:
            for k, x in v.items():
                _tensor_paths(x, (*path, k), out)


def tensor_paths(tree: Any, path: Path = ()) -> dict[Path, torch.Tensor]:
    """Every tensor of a (decoded or live) tree by its path, as `_tensor_paths` names them."""
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


ReadInto = Callable[[memoryview], None]  # fills the whole view, or raises
Target = Callable[[Path, torch.dtype, tuple[int, ...]], "torch.Tensor | None"]


def _bytes_of(t: torch.Tensor) -> memoryview:
    return t.detach().reshape(-1).view(torch.uint8).numpy().data if t.numel() else memoryview(
        bytearray())


def read(read_into: ReadInto, size: int, target: Target | None = None) -> Any:
    """Decode a snapshot of `size` bytes from a stream, each tensor read straight into
    `target(path, dtype, shape)` when that returns a tensor (a live parameter: no new memory
    to fault in), else into a new tensor. A stream cut short raises; tensors already read
    into targets are then partly overwritten."""
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
    paths: dict[int, Path] = {}
    _tensor_paths(doc["tree"], (), paths)
    tensors = []
    for i, spec in enumerate(doc["tensors"]):
        dtype, shape = getattr(torch, spec["dtype"]), tuple(int(d) for d in spec["shape"])
        gap = start + int(spec["offset"]) - consumed
        if gap:
            read_into(memoryview(bytearray(gap)))  # alignment padding
        dst = target(paths.get(i, ()), dtype, shape) if target else None
        if dst is None:
            dst = torch.empty(shape, dtype=dtype)
        view = _bytes_of(dst)
        read_into(view)
        consumed = start + int(spec["offset"]) + view.nbytes
        tensors.append(dst)
    if size > consumed:
        read_into(memoryview(bytearray(size - consumed)))
    return _decode_value(doc["tree"], tensors)


def decode(buf: bytes | bytearray) -> Any:
    """The tree `encode` made, from one buffer (its tensors are new, not views of `buf`)."""
    view, pos = memoryview(buf), 0

    def read_into(dst: memoryview) -> None:
        nonlocal pos
        n = dst.nbytes
        if pos + n > len(view):
            raise ValueError(f"snapshot is truncated: {len(view)} bytes")
        dst.cast("B")[:] = view[pos:pos + n]
        pos += n

    return read(read_into, len(view))
