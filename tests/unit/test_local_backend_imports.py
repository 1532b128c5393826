"""The local backend's modules import one another without cycles (STYLE 17), counting imports
inside functions and under TYPE_CHECKING: a cycle there is still two modules that need each
other."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "perdure.backends.local"
LOCAL = Path(__file__).resolve().parents[2] / "src" / "perdure" / "backends" / "local"


def _edges(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            found.add((node.module or "").rsplit(".", 1)[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.rsplit(".", 1)[1] for a in node.names
                         if a.name.startswith(PACKAGE + "."))
    return found


def test_no_import_cycles_in_the_local_backend() -> None:
    modules = {p.stem for p in LOCAL.glob("*.py") if p.stem != "__init__"}
    graph = {m: _edges(LOCAL / f"{m}.py") & modules for m in modules}

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
