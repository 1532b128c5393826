"""Flatten nested state into DCP keys, and rebuild it, keeping each dict key's original type.

The keys are exactly those ``torch.distributed.checkpoint`` gives the same nested dict
('model.fc.weight', 'optim.param_groups.0.lr'), so a stock ``dcp.load`` finds them. Dicts are
always walked; a list is walked only when it holds a tensor or a dict (as DCP does); anything
else (tuples included) is a leaf. Unlike DCP, an empty dict is kept as a leaf, so that a value
such as ``{"loader": {}}`` comes back instead of vanishing.

A save flattens a state of the same layout every time (the same modules, optimizers and keys),
and on the training thread: a `Flattener` keeps the last tree's layout (each container's type
and keys, each leaf's key and path) and flattens a tree that has it again by following it,
which builds no key and no path (less CPU than walking). Following gives exactly what
walking gives, or stops, and then the tree is walked (and its layout kept).

No side effects.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from perdure.runtime.checkpoint.metadata import Path

Flat = tuple[dict[str, Any], dict[str, Path]]
# Exact types that are never walked and never make a list walked (no Mapping, list or tensor).
_PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes, tuple})
_LEAVES = _PLAIN | {torch.Tensor}  # exact types that are never walked
_FOLLOWED = (dict, OrderedDict, list)  # the containers a layout records
_KEYS = (str, int)  # equal keys of these exact types print alike


@dataclass(frozen=True, slots=True)
class _Node:
    """A walked container of a layout: its exact type, its keys (a list's are its positions)
    and what each holds (another container, or None: a leaf)."""

    kind: type
    keys: list[Any]
    children: list[_Node | None]
    leaves: bool  # every child is a leaf


def _node(value: Any, keys: list[Any], children: list[_Node | None]) -> _Node:
    return _Node(type(value), keys, children, all(child is None for child in children))


@dataclass(frozen=True)
class _Layout:
    """A tree's containers, and its leaves' keys and paths in flatten's order."""

    root: _Node
    paths: dict[str, Path]


def flatten(tree: Mapping[Any, Any]) -> Flat:
    """Return (key -> leaf, key -> path) for a nested dict of tensors and plain values."""
    return _walk(tree)[0]


class Flattener:
    """``flatten`` for a tree whose layout is usually the last one's (see the module doc)."""

    def __init__(self) -> None:
        self._layout: _Layout | None = None

    def flatten(self, tree: Mapping[Any, Any]) -> Flat:
        """Return (key -> leaf, key -> path), exactly as ``flatten(tree)`` does."""
        layout = self._layout
        if layout is not None:
            leaves: list[Any] = []
            if _follow(layout.root, tree, leaves):
                return dict(zip(layout.paths, leaves, strict=True)), dict(layout.paths)
        out, root = _walk(tree)
        self._layout = None if root is None else _Layout(root, dict(out[1]))
        return out


def _walk(tree: Mapping[Any, Any]) -> tuple[Flat, _Node | None]:
    """Flatten ``tree`` and record its layout (None when it holds a container of a type not
    followed)."""
    flat: dict[str, Any] = {}
    paths: dict[str, Path] = {}
    followed = True

    def visit(path: Path, fqn: str, value: Any) -> _Node | None:
        nonlocal followed
        if _walked(value):
            pairs = value.items() if isinstance(value, Mapping) else enumerate(value)
            kind = "d" if isinstance(value, Mapping) else "l"
            keys: list[Any] = []
            children: list[_Node | None] = []
            for k, v in pairs:
                keys.append(k)
                children.append(visit((*path, (kind, k)), f"{fqn}.{k!s}", v))
            followed = followed and type(value) in _FOLLOWED
            return _node(value, keys, children)
        if fqn in flat:
            raise ValueError(
                f"state keys {paths[fqn]} and {path} both flatten to {fqn!r}; rename one."
            )
        flat[fqn] = value
        paths[fqn] = path
        return None

    children = [visit((("d", key),), str(key), value) for key, value in tree.items()]
    followed = followed and type(tree) in _FOLLOWED
    return (flat, paths), _node(tree, list(tree), children) if followed else None


def _follow(node: _Node, value: Any, leaves: list[Any]) -> bool:
    """Append ``value``'s leaves to ``leaves`` by ``node``'s layout; False when ``value`` does
    not have that layout (``leaves`` is then partial)."""
    kind = type(value)
    if kind is not node.kind:
        return False
    held: Iterable[Any]
    if kind is list:
        if len(value) != len(node.keys) or _is_leaf_list(value):
            return False
        held = value
    elif _same_keys(value, node.keys):
        held = value.values()
    else:
        return False
    if node.leaves:  # the usual container, held in C: all its values are plain or tensors
        if not all(map(_LEAVES.__contains__, map(type, held))) and any(map(_walked, held)):
            return False
        leaves.extend(held)
        return True
    for child, v in zip(node.children, held, strict=True):
        if child is None:
            if type(v) not in _LEAVES and _walked(v):
                return False
            leaves.append(v)
        elif not _follow(child, v, leaves):
            return False
    return True


def _same_keys(value: Mapping[Any, Any], keys: list[Any]) -> bool:
    """Whether a dict's keys are ``keys``, in order: the same objects, or equal strs or ints
    (which give the same key and path)."""
    if len(value) != len(keys):
        return False
    if all(map(operator.is_, value, keys)):
        return True
    return all(new is old or (type(new) is type(old) and type(old) in _KEYS and new == old)
               for new, old in zip(value, keys, strict=True))


def _walked(value: Any) -> bool:
    """Whether flatten descends into ``value``: a non-empty mapping, or a list that holds a
    tensor or a dict."""
    if type(value) in _LEAVES:
        return False
    if isinstance(value, Mapping):
        return bool(value)
    return isinstance(value, list) and not _is_leaf_list(value)


def _is_leaf_list(value: list[Any]) -> bool:
    for entry in value:
        if type(entry) in _PLAIN:
            continue
        if isinstance(entry, Mapping | torch.Tensor):
            return False
        if isinstance(entry, list) and not _is_leaf_list(entry):
            return False
    return True


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
