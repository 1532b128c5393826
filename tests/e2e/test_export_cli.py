"""`perdure export k8s` as a user runs it: YAML on stdout or in a file, warnings on stderr,
`--strict`, and a one-line error for each bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from perdure.cli.main import app

ROOT = Path(__file__).parents[2]
CRD = ROOT / "tests" / "unit" / "export" / "jobset-crd.yaml"
PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def export(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PERDURE, "export", "k8s", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_prints_a_jobset_and_warns_on_stderr(tmp_path: Path) -> None:
    r = export("examples/ddp_mlp/job.yaml", "--image", "ghcr.io/acme/train:1.0",
               "--queue", "team-a", "--priority-class", "high", "--namespace", "ml",
               "--crd", str(CRD))
    assert r.returncode == 0, r.stderr
    (jobset,) = yaml.safe_load_all(r.stdout)
    assert jobset["kind"] == "JobSet" and jobset["metadata"]["namespace"] == "ml"
    assert jobset["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a",
                                            "kueue.x-k8s.io/priority-class": "high"}
    assert r.stderr.startswith("perdure: warning: checkpoint.dir: unset")
    out = tmp_path / "jobset.yaml"
    w = export("examples/ddp_mlp/job.yaml", "--image", "ghcr.io/acme/train:1.0",
               "--queue", "team-a", "--priority-class", "high", "--namespace", "ml", "-o",
               str(out))
    assert w.returncode == 0 and w.stdout == "" and out.read_text() == r.stdout
    assert f"wrote {out}" in w.stderr


def test_strict_fails_on_the_elastic_example_naming_each_field() -> None:
    r = export("examples/elastic_mlp/job.yaml", "--image", "acme/train", "--strict")
    assert r.returncode != 0 and r.stdout == ""
    assert "perdure: error: pools.0.min_replicas: elastic resize" in r.stderr
    assert "perdure: error: checkpoint.dir" in r.stderr
    assert "Traceback" not in r.stderr


BAD = [
    (["nope.yaml", "--image", "acme/train"], "spec nope.yaml: no such file"),
    (["examples/ddp_mlp/job.yaml", "--image", "Acme Train"],
     "--image 'Acme Train': not a container image reference"),
    (["examples/ddp_mlp/job.yaml"], "--image is required"),
    (["examples/ddp_mlp/job.yaml", "--image", "acme/train", "-o", "/nonexistent-dir/x.yaml"],
     "-o /nonexistent-dir/x.yaml: cannot write: No such file or directory"),
    (["examples/ddp_mlp/job.yaml", "--image", "acme/train", "-o", "examples"],
     "-o examples: cannot write: Is a directory"),
    (["examples/ddp_mlp/job.yaml", "--image", "acme/train", "--crd", "examples/ddp_mlp/job.yaml"],
     "--crd examples/ddp_mlp/job.yaml: no CustomResourceDefinition"),
    (["examples/ddp_mlp/job.yaml", "--image", "acme/train", "--crd", "nope.yaml"],
     "CRD file nope.yaml: no such file"),
]


def one_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if not line.startswith("perdure: warning")]
    assert len(errors) == 1 and errors[0].startswith("perdure: "), stderr
    return errors[0]


@pytest.mark.parametrize(("args", "says"), BAD)
def test_bad_input_is_one_line(args: list[str], says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (the same command, without a process start per case)."""
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(app, ["export", "k8s", *args])
    assert r.exit_code == 2 and r.stdout == ""
    assert says in one_error(r.stderr)


def test_bad_input_as_a_process_is_one_line_without_traceback() -> None:
    r = export("examples/ddp_mlp/job.yaml", "--image", "Acme Train")
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert "--image 'Acme Train'" in one_error(r.stderr)
