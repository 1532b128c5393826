"""export/ is pure translation: it imports core, itself and the pure modules every layer
shares (what a secret is) only, and opens no file (the CLI reads and writes)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EXPORT = Path(__file__).resolve().parents[3] / "src" / "perdure" / "export"
SHARED = ("perdure.secrecy", "perdure.storageurl")  # pure, top-level: core and runtime use them
IO = ("subprocess", "sqlite3", "threading", "socket", "time", "os", "pathlib", "shutil", "io")


@pytest.mark.parametrize("path", sorted(EXPORT.glob("*.py")), ids=lambda p: p.name)
def test_export_modules_are_pure(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            if name.startswith("perdure."):
                assert name.startswith(("perdure.core", "perdure.export", *SHARED)), \
                    f"{path.name}: {name}"
            assert name.split(".")[0] not in IO, f"{path.name} imports {name}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id != "open", f"{path.name} opens a file"
