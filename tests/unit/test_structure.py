"""No import cycles anywhere (STYLE 17), no private names crossing core/'s modules, and
backends that never reach up into the controller, the CLI or the server (DESIGN layout).

The cycle check covers the whole tree: src/perdure, bench/ and the tests' helpers (the
package tests.helpers by its dotted name). Lazy
imports (inside functions) and TYPE_CHECKING imports count: a cycle deferred to run time is
still a cycle. `from package import name` is an edge to the submodule `name` when it is one,
else to the package; a bare `import helper` in bench/ or tests/ is the file beside the
importer (its folder is first on sys.path when it runs), else the only file of that name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "perdure"
TREES = (ROOT / "src", ROOT / "bench", ROOT / "tests")
HELPERS = ROOT / "tests" / "helpers"


def _modules() -> dict[str, Path]:
    """Dotted name -> file: perdure's by package path, bench's and tests' as `dir:stem`
    (their files are imported by bare name from their own folder)."""
    mods: dict[str, Path] = {}
    for base in TREES:
        for path in sorted(base.rglob("*.py")):
            if base.name == "src" or path.parent == HELPERS:
                parts = path.relative_to(base.parent if path.parent == HELPERS else base
                                         ).with_suffix("").parts
                parts = parts[:-1] if parts[-1] == "__init__" else parts
                mods[".".join(parts)] = path
            else:
                mods[f"{path.parent.relative_to(ROOT)}:{path.stem}"] = path
    return mods


def _imports(path: Path, package: str) -> Iterator[tuple[str, list[str]]]:
    """(module, names) of every import statement in `path`, relative ones resolved."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            yield base, [a.name for a in node.names]


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    by_stem: dict[str, list[str]] = {}
    for name in mods:
        if ":" in name:
            by_stem.setdefault(name.split(":")[1], []).append(name)

    def resolve(importer: str, module: str) -> str | None:
        if module in mods:
            return module
        if ":" in importer and "." not in module:
            beside = f"{importer.split(':')[0]}:{module}"
            if beside in mods:
                return beside
            if len(by_stem.get(module, [])) == 1:
                return by_stem[module][0]
        return None

    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.stem == "__init__" else name.rpartition(".")[0]
        edges: set[str] = set()
        for module, names in _imports(path, package):
            subs = [resolve(name, f"{module}.{n}") for n in names]
            edges |= {s for s in subs if s}
            if not names or not all(subs):
                target = resolve(name, module)
                edges |= {target} if target else set()
        graph[name] = edges - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*(path[path.index(nxt):] if nxt in path else path), node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, node])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [])):
            return found
    return None


def test_the_whole_tree_has_no_import_cycle() -> None:
    graph = _graph()
    assert len(graph) > 300, "the tree was not found"
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    # The check itself can fail: two modules that import each other only lazily and under
    # TYPE_CHECKING (as the relay and its operations once did) are a cycle.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    (tmp_path / "x.py").write_text("def f():\n    from p.y import g\n")
    (tmp_path / "y.py").write_text("from typing import TYPE_CHECKING\n"
                                   "if TYPE_CHECKING:\n    from p import x\n")
    assert [m for m, _ in _imports(tmp_path / "x.py", "p")] == ["p.y"]
    assert list(_imports(tmp_path / "y.py", "p"))[1] == ("p", ["x"])


def test_core_has_no_private_imports() -> None:
    private = [f"{path.name} imports {module}.{name}"
               for path in sorted((SRC / "core").glob("*.py"))
               for module, names in _imports(path, "perdure.core")
               for name in names if name.startswith("_")]
    assert not private, private


def test_backends_never_import_the_controller_cli_or_server() -> None:
    # The relay (a transport) lives in backends/relay/ for this reason: the local backend's
    # launch transport starts it, and a backend may not reach up into controller/.
    above = ("perdure.controller", "perdure.cli", "perdure.serve")
    wrong = [f"{path.relative_to(SRC)} imports {module}"
             for path in sorted((SRC / "backends").rglob("*.py"))
             for module, names in _imports(path, "perdure.backends")
             if module.startswith(above)]
    assert not wrong, wrong
