"""Load YAML text with bounds a hostile file cannot get around.

No side effects. It refuses, with the line where it can: text that is not UTF-8 or too long,
nesting too deep, aliases that expand too far (an "alias bomb") or recurse, and duplicate keys
(YAML's silent last-wins).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True)
class Limits:
    text: int  # characters
    depth: int  # nesting levels
    expanded: int  # nodes plus scalar characters, every alias expanded


# Real specs and cluster files are a few KB and nest 5 levels.
SPEC = Limits(text=128 * 1024, depth=32, expanded=256 * 1024)
# JobSet's CRD (`export k8s --crd`) is ~800 K characters, nests ~40 levels: a few times that
CRD = Limits(text=4 * 1024 * 1024, depth=96, expanded=8 * 1024 * 1024)

# libyaml when PyYAML has it (faster on a CRD); the checks are the same either way.
_CParser: Any = getattr(yaml, "CSafeLoader", None)


class YamlError(ValueError):
    """The text cannot be loaded; the message says why and where."""


def decode(data: bytes) -> str:
    """UTF-8 text from a file's bytes; YamlError naming the first bad byte otherwise."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise YamlError(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} "
            f"(offset {exc.start}); save the file as UTF-8"
        ) from None


class _NoDuplicates:
    """A loader mixin refusing a key repeated in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may be overridden by the mapping's own keys
            key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
            if isinstance(key, list | dict):
                continue  # unhashable: the constructor names it
            if key in seen:
                raise YamlError(
                    f"duplicate key {_short(key)} (line {key_node.start_mark.line + 1}); "
                    "each key may appear once in a mapping"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc,no-any-return]


class _PyLoader(_NoDuplicates, yaml.SafeLoader):
    pass


_Loader: Any = type("_CLoader", (_NoDuplicates, _CParser), {}) if _CParser else _PyLoader


def _check_depth(text: str, limit: int) -> None:
    """Refuse nesting deeper than `limit` from the parser's events, before any node is built
    (libyaml's composer recurses in C, where a deep file would overflow the stack)."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_CParser or yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > limit:
                    raise _too_deep(limit, event.start_mark)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem):  # libyaml's own bound (1,000), met first
            raise _too_deep(limit, exc.problem_mark) from None
        raise


def _too_deep(limit: int, mark: Any) -> YamlError:
    where = f" (line {mark.line + 1})" if mark is not None else ""
    return YamlError(f"nested deeper than {limit} levels{where}")


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """Nodes plus scalar characters with every alias expanded; stops early past the limit.
    Aliases share node objects: sizes memoized by identity keep it linear."""

    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if done:
            open_nodes.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        if key in open_nodes:
            raise YamlError(f"a recursive alias (line {node.start_mark.line + 1}): "
                            "an anchor may not contain an alias to itself")
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1 + len(node.value)
            continue
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load(text: str, limits: Limits = SPEC) -> Any:
    """The YAML document in `text` as plain data; YamlError saying what is wrong and where."""
    docs = _load(text, limits, single=True)
    return docs[0] if docs else None


def load_all(text: str, limits: Limits = SPEC) -> list[Any]:
    """Every YAML document in `text` (a `---` stream); the limits hold for the whole text."""
    return _load(text, limits, single=False)


def _load(text: str, limits: Limits, single: bool) -> list[Any]:
    if len(text) > limits.text:
        raise YamlError(f"{len(text)} characters is more than the {limits.text} allowed")
    loader = None
    try:
        _check_depth(text, limits.depth)  # the reader refuses unprintable characters (NUL)
        loader = _Loader(text)
        nodes = [loader.get_single_node()] if single else _nodes(loader)
        total = 0
        for node in nodes:
            total += _expanded_size(node, limits.expanded - total) if node is not None else 0
            if total > limits.expanded:
                raise YamlError(
                    f"its aliases expand to more than {limits.expanded} nodes and characters; "
                    "write the values out or use fewer aliases"
                )
        return [None if n is None else loader.construct_document(n) for n in nodes]
    except yaml.YAMLError as exc:
        raise YamlError(str(exc)) from None
    except (ValueError, OverflowError, TypeError) as exc:  # e.g. an int of 5,000 digits
        if isinstance(exc, YamlError):
            raise
        raise YamlError(f"a value cannot be read: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _nodes(loader: Any) -> list[yaml.Node]:
    out = []
    while loader.check_node():
        out.append(loader.get_node())
    return out
