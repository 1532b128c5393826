"""The node-side modules, and the local backend's, import one another without cycles (STYLE
17), counting imports inside functions and under TYPE_CHECKING: a cycle there is still two
modules that need each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BACKENDS = Path(__file__).resolve().parents[2] / "src" / "perdure" / "backends"


def _edges(path: Path, package: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == package:
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
            found.add((node.module or "").rsplit(".", 1)[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.rsplit(".", 1)[1] for a in node.names
                         if a.name.startswith(package + "."))
    return found


@pytest.mark.parametrize("folder", ["node", "local"])
def test_no_import_cycles_in_the_node_side_modules(folder: str) -> None:
    package, here = f"perdure.backends.{folder}", BACKENDS / folder
    modules = {p.stem for p in here.glob("*.py") if p.stem != "__init__"}
    graph = {m: _edges(here / f"{m}.py", package) & modules for m in modules}

    def cycle_from(start: str) -> list[str] | None:
        todo = [(start, [start])]
        while todo:
            node, path = todo.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return [*path, start]
                if nxt not in path:
                    todo.append((nxt, [*path, nxt]))
        return None

    cycles = [c for m in sorted(modules) if (c := cycle_from(m))]
    assert not cycles, f"import cycle: {' -> '.join(cycles[0])}"
