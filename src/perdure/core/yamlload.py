"""Load a spec's YAML text with bounds a hostile file cannot get around.

No side effects: takes bytes or text, never reads files. What it refuses, with the line where
it can: text that is not UTF-8, more than MAX_TEXT characters, nesting deeper than MAX_DEPTH,
aliases that expand to more than MAX_EXPANDED (an "alias bomb" is a few hundred bytes that
expand to gigabytes), recursive aliases, and duplicate keys (YAML's silent last-wins).
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_TEXT = 128 * 1024  # characters; real specs and cluster files are a few KB
MAX_DEPTH = 32  # nesting levels; a spec needs 5
# Size after expanding every alias: one per node plus each scalar's length. Bounds the work of
# validation and the size of the stored spec whatever the aliases multiply.
MAX_EXPANDED = 256 * 1024


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


class _Loader(yaml.SafeLoader):
    """SafeLoader with a depth limit and duplicate keys refused."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise YamlError(f"nested deeper than {MAX_DEPTH} levels (line {mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may be overridden by the mapping's own keys
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):
                continue  # unhashable: the constructor names it
            if key in seen:
                raise YamlError(
                    f"duplicate key {_short(key)} (line {key_node.start_mark.line + 1}); "
                    "each key may appear once in a mapping"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _expanded_size(root: yaml.Node) -> int:
    """Nodes plus scalar characters with every alias expanded; stops early past the limit.

    Aliases share node objects, so sizes are memoized by identity: linear in the file.
    """
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
            sizes[key] = min(MAX_EXPANDED + 1, 1 + sum(sizes[id(c)] for c in children))
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


def load(text: str) -> Any:
    """The YAML document in `text` as plain data; YamlError saying what is wrong and where."""
    if len(text) > MAX_TEXT:
        raise YamlError(f"{len(text)} characters is more than the {MAX_TEXT} allowed")
    try:
        loader = _Loader(text)  # its reader refuses control characters (a NUL) at once
    except yaml.YAMLError as exc:
        raise YamlError(str(exc)) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node)
        if size > MAX_EXPANDED:
            raise YamlError(
                f"its aliases expand to more than {MAX_EXPANDED} nodes and characters; "
                "write the values out or use fewer aliases"
            )
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise YamlError(str(exc)) from None
    except (ValueError, OverflowError, TypeError) as exc:  # e.g. an int of 5,000 digits
        if isinstance(exc, YamlError):
            raise
        raise YamlError(f"a value cannot be read: {exc}") from None
    finally:
        loader.dispose()
