"""Flatten nested state into DCP keys, and rebuild it, keeping each dict key's original type.

The keys are those ``torch.distributed.checkpoint`` gives the same nested dict, so a stock
``dcp.load`` finds them; unlike DCP, an empty dict is kept as a leaf, so it comes back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from perdure.runtime.checkpoint.metadata import Path

Flat = tuple[dict[str, Any], dict[str, Path]]


def flatten(tree: Mapping[Any, Any]) -> Flat:
    """Return (key -> leaf, key -> path) for a nested dict of tensors and plain values."""
    flat: dict[str, Any] = {}
    paths: dict[str, Path] = {}

    def visit(path: Path, fqn: str, value: Any) -> None:
        if _walked(value):
            pairs = value.items() if isinstance(value, Mapping) else enumerate(value)
            kind = "d" if isinstance(value, Mapping) else "l"
            for k, v in pairs:
                visit((*path, (kind, k)), f"{fqn}.{k!s}", v)
            return
        if fqn in flat:
            raise ValueError(
                f"state keys {paths[fqn]} and {path} both flatten to {fqn!r}; rename one."
            )
        flat[fqn] = value
        paths[fqn] = path

    for key, value in tree.items():
        visit((("d", key),), str(key), value)
    return flat, paths


def _walked(value: Any) -> bool:
    """Whether flatten descends into ``value``: a non-empty mapping, or a list that holds
    (at any depth of lists) a tensor or a dict."""
    if isinstance(value, Mapping):
        return bool(value)
    return isinstance(value, list) and any(
        isinstance(e, Mapping | torch.Tensor) or _walked(e) for e in value)


def unflatten(leaves: Mapping[str, Any], paths: Mapping[str, Path]) -> dict[Any, Any]:
    """Rebuild the nested dict from leaves and their paths (lists grow to fit their indices)."""
    root: dict[Any, Any] = {}
    for fqn, value in leaves.items():
        _set(root, paths[fqn], value)
    return root


def _set(root: dict[Any, Any], path: Path, value: Any) -> None:
    node: Any = root
    for depth, (kind, key) in enumerate(path):
        last = depth == len(path) - 1
        nxt: Any = value if last else ({} if path[depth + 1][0] == "d" else [])
        if kind == "d":
            if last:
                node[key] = value
            else:
                node = node.setdefault(key, nxt)
        else:
            while len(node) <= key:
                node.append(None)
            if last:
                node[key] = value
            else:
                if node[key] is None:
                    node[key] = nxt
                node = node[key]
