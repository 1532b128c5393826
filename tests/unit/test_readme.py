"""The README's snippets are true (issue 19.4). The convention, for every fenced block:

- ```python: parses; its `perdure` imports resolve; a block whose first line is `# PATH` (a
  file of the repo) is that file, byte for byte.
- ```yaml: loads with the specs' bounded reader; `# PATH` as above; a job spec, a cluster
  file, or a section of either (`watchdog:`, `pools:` ...) validates (sections merged into a
  minimal spec); Kubernetes objects (`apiVersion`) only load.
- ```diff: a whole-file diff whose `---`/`+++` name two files of the repo: both rebuilt from
  it are those files.
- ```bash / ```sh: `bash -n` accepts it; one preceded by `<!-- readme-test: run -->` is run as
  written by tests/e2e/test_readme_quickstart.py.

The spec reference between its markers is what `make spec-reference` generates today.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from perdure.cli import specref
from perdure.core import yamlload
from perdure.core.spec import ClusterSpec, JobSpec

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^(<!-- readme-test: (\w+) -->\n)?```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)


def blocks(*langs: str) -> list[tuple[str, str, str]]:
    """(language, text, marker) of the README's fenced blocks in `langs`."""
    found = [(m.group(3), m.group(4), m.group(2) or "") for m in FENCE.finditer(README)]
    return [b for b in found if b[0] in langs]


def header_path(text: str) -> Path | None:
    first = text.split("\n", 1)[0]
    if first.startswith("# ") and "/" in first and " " not in first[2:].strip():
        return ROOT / first[2:].strip()
    return None


def ids(items: list[tuple[str, str, str]]) -> list[str]:
    return [f"{lang}:{text.splitlines()[0][:40] if text else ''}" for lang, text, _ in items]


PYTHON, YAML, DIFF = blocks("python"), blocks("yaml"), blocks("diff")
SHELL = blocks("bash", "sh")


def test_the_readme_has_the_blocks_this_checks() -> None:
    assert len(PYTHON) >= 3 and len(YAML) >= 6 and len(DIFF) == 1 and len(SHELL) >= 4
    assert [m for _, _, m in SHELL if m] == ["run"]
    assert "DESIGN.md" not in README


@pytest.mark.parametrize(("lang", "text", "marker"), PYTHON, ids=ids(PYTHON))
def test_python_blocks_parse_and_their_imports_resolve(lang: str, text: str, marker: str
                                                       ) -> None:
    tree = ast.parse(text)
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    ours = [n for n in imports if "perdure" in ast.unparse(n).split()[1]]
    exec(compile(ast.Module(body=ours, type_ignores=[]), "README", "exec"), {})
    path = header_path(text)
    if path is not None:
        assert path.read_text() == text


def _validate_yaml(data: dict[str, Any]) -> None:
    if "apiVersion" in data:
        return  # a Kubernetes object: perdure's export checks those
    job_fields, cluster_fields = set(JobSpec.model_fields), set(ClusterSpec.model_fields)
    if set(data) <= job_fields:
        minimal = {"name": "readme", "pools": [{"name": "w", "command": ["python", "t.py"]}]}
        JobSpec.model_validate({**minimal, **data})
    else:
        assert set(data) <= cluster_fields, f"neither a spec nor a cluster file: {sorted(data)}"
        ClusterSpec.model_validate(data)


@pytest.mark.parametrize(("lang", "text", "marker"), YAML, ids=ids(YAML))
def test_yaml_blocks_load_and_validate(lang: str, text: str, marker: str) -> None:
    data = yamlload.load(text)
    assert isinstance(data, dict)
    _validate_yaml(data)
    path = header_path(text)
    if path is not None:
        assert path.read_text() == text


def test_the_diff_rebuilds_both_scripts() -> None:
    ((_, text, _),) = DIFF
    lines = text.splitlines(keepends=True)
    assert lines[0].startswith("--- ") and lines[1].startswith("+++ ")
    assert lines[2].startswith("@@ -1,") and sum(ln.startswith("@@") for ln in lines) == 1
    before = "".join(ln[1:] for ln in lines[3:] if ln[0] in " -")
    after = "".join(ln[1:] for ln in lines[3:] if ln[0] in " +")
    assert (ROOT / lines[0][4:].strip()).read_text() == before
    assert (ROOT / lines[1][4:].strip()).read_text() == after
    changed = sum(ln[0] in "+-" for ln in lines[3:])
    assert changed <= 30, changed  # a small change is the point of the section


@pytest.mark.parametrize(("lang", "text", "marker"), SHELL, ids=ids(SHELL))
def test_shell_blocks_parse(lang: str, text: str, marker: str) -> None:
    r = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_the_spec_reference_is_up_to_date() -> None:
    assert specref.splice(README) == README, "run `make spec-reference` and commit README.md"


def test_every_field_is_described() -> None:
    undescribed = [row[0] for model in (JobSpec, ClusterSpec) for row in specref.rows(model)
                   if row[3] == specref.UNDOCUMENTED]
    assert not undescribed, (f"describe {undescribed}: a Field(description=...) or an entry "
                             "in perdure.cli.specref.DESCRIPTIONS")
