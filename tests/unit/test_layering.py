"""The layers of DESIGN.md hold: core imports no shell, runtime imports no control plane."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "perdure"
SHELL = ("perdure.controller", "perdure.backends", "perdure.store", "perdure.api", "perdure.cli",
         "perdure.serve")
IO_MODULES = ("subprocess", "sqlite3", "threading", "socket", "time", "os")


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
    return out


@pytest.mark.parametrize("path", sorted((SRC / "core").rglob("*.py")), ids=lambda p: p.name)
def test_core_is_pure(path: Path) -> None:
    for name in imports(path):
        assert not name.startswith((*SHELL, "perdure.runtime")), f"{path.name} imports {name}"
        assert name.split(".")[0] not in IO_MODULES, f"{path.name} imports {name} (I/O or clock)"


@pytest.mark.parametrize("path", sorted((SRC / "runtime").rglob("*.py")), ids=lambda p: p.name)
def test_runtime_never_imports_the_control_plane(path: Path) -> None:
    for name in imports(path):
        assert not name.startswith((*SHELL, "perdure.core")), f"{path.name} imports {name}"


def test_ray_only_when_selected() -> None:
    code = ("import sys, perdure.cli.main, perdure.backends.factory, perdure.runtime; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importing_the_runtime_is_cheap() -> None:
    code = "import sys, perdure.runtime, perdure; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# The one module of cli/ that may import serve/: the `perdure serve` command starts the server.
SERVE_COMMAND = SRC / "cli" / "serve.py"


@pytest.mark.parametrize("path", sorted((SRC / "serve").rglob("*.py")), ids=lambda p: p.name)
def test_serve_never_imports_the_cli(path: Path) -> None:
    for name in imports(path):
        assert not name.startswith("perdure.cli"), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", sorted(p for p in (SRC / "cli").rglob("*.py")
                                        if p != SERVE_COMMAND), ids=lambda p: p.name)
def test_the_cli_never_imports_serve(path: Path) -> None:
    for name in imports(path):
        assert not name.startswith("perdure.serve"), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", sorted((SRC / "views").rglob("*.py")), ids=lambda p: p.name)
def test_views_import_neither_the_cli_nor_serve(path: Path) -> None:
    for name in imports(path):
        assert not name.startswith(("perdure.cli", "perdure.serve")), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", sorted((SRC / "integrations").rglob("*.py")),
                         ids=lambda p: p.name)
def test_integrations_use_only_the_public_runtime(path: Path) -> None:
    import perdure.runtime

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("perdure.runtime.")]
            assert not names, f"{path.name} imports {names}: use `from perdure.runtime import`"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "perdure.runtime"):
            assert node.module == "perdure.runtime", \
                f"{path.name} imports from {node.module}: use `from perdure.runtime import`"
            private = [a.name for a in node.names if a.name not in perdure.runtime.__all__]
            assert not private, f"{path.name} imports {private}, not in perdure.runtime.__all__"
