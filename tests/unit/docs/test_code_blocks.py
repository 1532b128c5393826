"""Every fenced block of README.md and of every page under docs/ is true. The convention:

- ```python: parses; its `perdure` imports resolve; a block whose first line is `# PATH` (a
  file of the repo) is that file, byte for byte.
- ```yaml: loads with the specs' bounded reader; `# PATH` as above; a job spec, a cluster
  file, or a section of either (`watchdog:`, `pools:` ...) validates (sections merged into a
  minimal spec); Kubernetes objects (`apiVersion`) and blocks marked
  `<!-- docs-test: load -->` (other tools' YAML) only load.
- ```diff: a whole-file diff whose `---`/`+++` name two files of the repo: both rebuilt from
  it are those files.
- ```bash / ```sh: `bash -n` accepts it; one preceded by `<!-- docs-test: run -->` is run as
  written by tests/e2e/test_readme_quickstart.py.
- ```text: output and layouts, not checked.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from perdure.core import yamlload
from perdure.core.clusterspec import ClusterSpec
from perdure.core.spec import JobSpec

ROOT = Path(__file__).parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(<!-- docs-test: (\w+) -->\n)?```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
LANGS = {"python", "yaml", "diff", "bash", "sh", "text"}
MARKERS = {"run", "load"}


def blocks(*langs: str) -> list[tuple[str, str, str, str]]:
    """(page, language, text, marker) of every page's fenced blocks in `langs`."""
    found = [(str(page.relative_to(ROOT)), m.group(3), m.group(4), m.group(2) or "")
             for page in PAGES for m in FENCE.finditer(page.read_text())]
    return [b for b in found if b[1] in langs]


def header_path(text: str) -> Path | None:
    first = text.split("\n", 1)[0]
    if first.startswith("# ") and "/" in first and " " not in first[2:].strip():
        return ROOT / first[2:].strip()
    return None


def ids(items: list[tuple[str, str, str, str]]) -> list[str]:
    return [f"{page}:{lang}:{text.splitlines()[0][:40] if text else ''}"
            for page, lang, text, _ in items]


PYTHON, YAML, DIFF = blocks("python"), blocks("yaml"), blocks("diff")
SHELL = blocks("bash", "sh")


def test_the_pages_have_the_blocks_this_checks() -> None:
    assert len(PAGES) >= 30
    everything = blocks(*LANGS, "")
    unknown = [(page, lang) for page, lang, _, _ in everything if lang not in LANGS]
    assert not unknown, f"a fence without a language this test knows: {unknown}"
    assert len(PYTHON) >= 7 and len(YAML) >= 20 and len(DIFF) == 1 and len(SHELL) >= 15
    runs = [(page, m) for page, _, _, m in SHELL if m]
    assert runs == [("docs/getting-started.md", "run")]
    assert {m for *_, m in everything} <= MARKERS | {""}
    for page in ("docs/guides/hf-trainer.md", "docs/guides/lightning.md"):  # run whole by
        # tests/integration/frameworks/test_readme_frameworks.py: one script, one spec
        assert [b[1] for b in everything if b[0] == page] == ["python", "yaml"], page


def test_no_page_points_at_the_old_readme_sections() -> None:
    for page in PAGES:
        text = page.read_text()
        assert "DESIGN.md" not in text, page
        assert "the README's" not in text, page


@pytest.mark.parametrize(("page", "lang", "text", "marker"), PYTHON, ids=ids(PYTHON))
def test_python_blocks_parse_and_their_imports_resolve(page: str, lang: str, text: str,
                                                       marker: str) -> None:
    tree = ast.parse(text)
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    ours = [n for n in imports if "perdure" in ast.unparse(n).split()[1]]
    exec(compile(ast.Module(body=ours, type_ignores=[]), page, "exec"), {})
    path = header_path(text)
    if path is not None:
        assert path.read_text() == text


def _validate_yaml(data: dict[str, Any]) -> None:
    if "apiVersion" in data:
        return  # a Kubernetes object: perdure's export checks those
    job_fields, cluster_fields = set(JobSpec.model_fields), set(ClusterSpec.model_fields)
    if set(data) <= job_fields:
        minimal = {"name": "docs", "pools": [{"name": "w", "command": ["python", "t.py"]}]}
        JobSpec.model_validate({**minimal, **data})
    else:
        assert set(data) <= cluster_fields, f"neither a spec nor a cluster file: {sorted(data)}"
        ClusterSpec.model_validate(data)


@pytest.mark.parametrize(("page", "lang", "text", "marker"), YAML, ids=ids(YAML))
def test_yaml_blocks_load_and_validate(page: str, lang: str, text: str, marker: str) -> None:
    data = yamlload.load(text)
    assert isinstance(data, dict)
    if marker != "load":
        _validate_yaml(data)
    path = header_path(text)
    if path is not None:
        assert path.read_text() == text


@pytest.mark.parametrize(("page", "lang", "text", "marker"), DIFF, ids=ids(DIFF))
def test_diffs_rebuild_both_scripts(page: str, lang: str, text: str, marker: str) -> None:
    lines = text.splitlines(keepends=True)
    assert lines[0].startswith("--- ") and lines[1].startswith("+++ ")
    assert lines[2].startswith("@@ -1,") and sum(ln.startswith("@@") for ln in lines) == 1
    before = "".join(ln[1:] for ln in lines[3:] if ln[0] in " -")
    after = "".join(ln[1:] for ln in lines[3:] if ln[0] in " +")
    assert (ROOT / lines[0][4:].strip()).read_text() == before
    assert (ROOT / lines[1][4:].strip()).read_text() == after
    changed = sum(ln[0] in "+-" for ln in lines[3:])
    assert changed <= 30, changed  # a small change is the point of the guide


@pytest.mark.parametrize(("page", "lang", "text", "marker"), SHELL, ids=ids(SHELL))
def test_shell_blocks_parse(page: str, lang: str, text: str, marker: str) -> None:
    r = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
