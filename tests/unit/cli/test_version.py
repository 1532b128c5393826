"""The version is written once, in pyproject.toml; the package and the CLI read it from the
installed package's metadata."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import perdure

ROOT = Path(__file__).parents[3]


def test_the_version_comes_from_pyproject() -> None:
    declared = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert declared is not None
    assert perdure.__version__ == version("perdure") == declared.group(1)
    assert "__version__ =" not in (ROOT / "src/perdure/__init__.py").read_text()
    assert f"## {declared.group(1)} " in (ROOT / "CHANGELOG.md").read_text()


def test_perdure_version_prints_it() -> None:
    r = subprocess.run([sys.executable, "-m", "perdure.cli.main", "--version"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == f"perdure {perdure.__version__}\n", r
