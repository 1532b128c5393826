"""No import cycles and no private names crossing modules (STYLE 17), checked on core/."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "perdure"


def _graph(package: str) -> tuple[dict[str, set[str]], list[str]]:
    """Module -> the package's modules it imports (TYPE_CHECKING and lazy ones too), and
    every `from module import _private` found."""
    graph: dict[str, set[str]] = {}
    private: list[str] = []
    for path in sorted((SRC / package).glob("*.py")):
        name = f"perdure.{package}.{path.stem}"
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                private += [f"{name} imports {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_") and node.module != "__future__"]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t.startswith(f"perdure.{package}.")}
    return {k: {t for t in v if t in graph and t != k} for k, v in graph.items()}, private


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, node])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [])):
            return found
    return None


def test_core_has_no_import_cycle_and_no_private_imports() -> None:
    graph, private = _graph("core")
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])
    assert not private, private
