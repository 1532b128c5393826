"""`export k8s --crd` reads the CRD with the specs' bounded YAML reader (issue 20.7): a CRD of
the real JobSet CRD's size (~800 kB, ~40 levels deep) is taken, an alias bomb, a recursive
alias or a nesting bomb is refused in well under a second, each in one line."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from perdure.cli.main import app
from perdure.core import yamlload

ROOT = Path(__file__).parents[2]
CRD = ROOT / "tests" / "unit" / "export" / "jobset-crd.yaml"
ARGS = ["export", "k8s", "examples/ddp_mlp/job.yaml", "--image", "acme/train", "--crd"]
DOC = "(generated) " + "This field documents a part of the pod template in detail. " * 5


def _schema(depth: int, width: int) -> dict[str, Any]:
    """An object schema `depth` levels of properties deep, `width` described leaves at each."""
    props: dict[str, Any] = {f"leaf{i}": {"type": "string", "description": DOC}
                             for i in range(width)}
    if depth:
        props["nested"] = _schema(depth - 1, width)
    return {"type": "object", "description": DOC, "properties": props}


def real_sized_crd() -> str:
    """The cut-down JobSet CRD with a `status` schema as large and as deep as the released
    CRD's pod template (the exported JobSet has no status, so the check is unchanged)."""
    crd = yaml.safe_load(CRD.read_text())
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    root["properties"]["status"] = {"type": "object", "properties": {
        f"part{i}": _schema(16, 8) for i in range(6)}}
    return yaml.safe_dump(crd, sort_keys=False, width=100)


def run(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, float]:
    path = tmp_path / "crd.yaml"
    path.write_text(text)
    monkeypatch.chdir(ROOT)
    began = time.process_time()
    r = CliRunner().invoke(app, [*ARGS, str(path)])
    return r.exit_code, r.stderr, time.process_time() - began


def test_a_crd_the_size_of_jobsets_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    text = real_sized_crd()
    assert 700_000 < len(text) < 1_000_000, len(text)
    code, err, _ = run(tmp_path, text, monkeypatch)
    assert code == 0, err
    assert yamlload.CRD.text > 3 * len(text)  # room for the CRD to grow


BOMB = "\n".join(
    [f"a0: &a0 [{', '.join(['lol'] * 9)}]"]
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 12)]
)


@pytest.mark.parametrize(("text", "says"), [
    (CRD.read_text() + "---\n" + BOMB + "\n", "aliases expand to more than"),
    ("x: &a [1, *a]\n", "recursive alias"),
    ("x: &a {k: *a}\n", "recursive alias"),
    ("x: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested deeper than"),
    ("a:\n" + "".join(" " * (2 * i) + f"k{i}:\n" for i in range(1, 200)), "nested deeper"),
])
def test_hostile_crds_are_refused_fast_in_one_line(tmp_path: Path, text: str, says: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    code, err, cpu = run(tmp_path, text, monkeypatch)
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perdure: --crd ") and says in lines[0], err
    assert cpu < 1.5, cpu


def test_a_crd_over_the_limit_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, err, _ = run(tmp_path, "# " + "x" * (4 * yamlload.CRD.text) + "\n", monkeypatch)
    assert code == 2 and "larger than" in err and "Traceback" not in err
