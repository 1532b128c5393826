"""perdure.versions: the declared torch range is pyproject's, and `import perdure` refuses any
other torch with one line."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib

from perdure import versions

ROOT = Path(__file__).resolve().parents[2]


def test_the_range_is_pyprojects() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = [d for d in deps if re.match(r"torch\b", d)]
    assert torch == [f"torch{versions.TORCH_RANGE}"]
    low, high = versions.SUPPORTED
    assert f">={low[0]}.{low[1]},<{high[0]}.{high[1]}" == versions.TORCH_RANGE


@pytest.mark.parametrize(("text", "ok"), [
    ("2.6.0", True), ("2.10.0+cu128", True), ("2.14.1", True), ("2.13.0+cpu", True),
    ("2.5.1", False), ("2.4.0+cpu", False), ("2.15.0", False), ("3.0.0", False),
    ("1.13.1", False), ("2.15.0.dev20261201", False), ("unknown", True)])
def test_unsupported_names_the_installed_and_the_supported_versions(text: str, ok: bool) -> None:
    line = versions.unsupported_torch(text)
    if ok:
        assert line is None
        return
    assert line is not None and "\n" not in line
    assert text in line and ">=2.6,<2.15" in line


def _import_perdure_with_torch(version: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`import perdure` where the torch found first is of ``version`` (its version.py only: the
    check must refuse it before anything imports torch)."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise SystemExit('torch itself was imported')\n")
    (fake / "version.py").write_text(f"__version__ = '{version}'\ncuda = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"),
                                                         str(ROOT / "src")])}
    return subprocess.run([sys.executable, "-c", "import perdure; print('imported')"],
                          env=env, capture_output=True, text=True, timeout=60)


def test_import_perdure_on_torch_2_5_exits_with_one_line(tmp_path: Path) -> None:
    done = _import_perdure_with_torch("2.5.1+cpu", tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [versions.unsupported_torch("2.5.1+cpu")]
    assert "Traceback" not in done.stderr


def test_import_perdure_on_a_supported_torch_imports_nothing_of_it(tmp_path: Path) -> None:
    done = _import_perdure_with_torch("2.6.0", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported"


def test_the_installed_torch_is_read_without_importing_it() -> None:
    code = ("import sys; from perdure import versions; v = versions.installed_torch(); "
            "import torch; print(v == torch.__version__, 'torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == ["True", "True"]


def _matrix() -> Any:
    spec = importlib.util.spec_from_file_location("compat_matrix",
                                                  ROOT / "scripts" / "compat_matrix.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_versions_page_is_generated_from_pyproject_and_the_last_matrix_run() -> None:
    matrix = _matrix()
    page = matrix.page(matrix.load_results())
    assert (ROOT / "docs" / "guides" / "versions.md").read_text() == page, (
        "docs/guides/versions.md is stale: run python3 scripts/compat_matrix.py --docs-only")
    assert f"| torch | `{versions.TORCH_RANGE}` |" in page


def test_readmes_supported_versions_table_is_generated() -> None:
    matrix = _matrix()
    text = (ROOT / "README.md").read_text()
    assert matrix.readme(text, matrix.load_results()) == text, (
        "README.md's supported-versions table is stale: run python3 scripts/compat_matrix.py "
        "--docs-only")
    assert f"| torch | `{versions.TORCH_RANGE}` |" in text


def test_the_matrix_has_a_cell_for_every_supported_torch_minor() -> None:
    matrix = _matrix()
    minors = [versions.torch_version(v) for v in matrix.TORCH_RELEASES]
    low, high = versions.SUPPORTED
    assert minors == [(2, m) for m in range(low[1], high[1])]


def test_the_matrix_reads_pytests_closing_line() -> None:
    matrix = _matrix()
    assert matrix.counts("....\n3 failed, 40 passed, 2 skipped in 9.1s\n") == {
        "passed": 40, "failed": 3, "skipped": 2}
    assert matrix.counts("== 1 error, 5 passed in 3s ==") == {"passed": 5, "failed": 1,
                                                               "skipped": 0}


def test_the_frameworks_floors_are_tested_at_the_torch_floor() -> None:
    """The layered cells install exactly the floors pyproject declares, on the torch floor
    (and transformers' floor on torch 2.10 too: the version users named in issue 34)."""
    matrix = _matrix()
    declared = matrix.declared()
    newest = f"torch-{matrix.TORCH_RELEASES[-1].rsplit('.', 1)[0]}"
    layered = [c for c in matrix.CELLS if c.base and c.base != newest]
    assert {c.name: c.base for c in layered} == {"torch-2.6-hf": "torch-2.6",
                                                 "torch-2.6-lightning": "torch-2.6",
                                                 "torch-2.10-hf": "torch-2.10"}
    # and the frameworks' newest on the newest torch
    assert {c.name for c in matrix.CELLS if c.base == newest} == {f"{newest}-hf",
                                                                 f"{newest}-lightning"}
    assert versions.torch_version(matrix.TORCH_RELEASES[0]) == versions.SUPPORTED[0]
    for cell in layered:
        base = matrix.cell_named(cell.base)
        assert base.base is None and base.requirements[0].startswith("torch==")
        assert len(base.requirements) == 1 and base.requirements[0][7:] in matrix.TORCH_RELEASES
        for requirement in cell.requirements:
            found = re.match(r"([a-z]+)(?:>=|==)(\d+\.\d+)", requirement)
            assert found is not None, requirement
            assert declared[found[1]].startswith(f">={found[2]},"), (requirement, declared)
        assert "frameworks_long or not frameworks_long" in cell.groups["frameworks"]
