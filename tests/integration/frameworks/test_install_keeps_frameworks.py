"""`pip install 'perdure[hf,lightning]'` into an environment that already has a supported
transformers and Lightning keeps them: the extras are ranges, not pins (what pip would do is
read from its own report of a dry run; PyPI must be reachable)."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HAVE = {"transformers": "4.57.6", "lightning": "2.5.6"}  # what the user already runs


def pip(python: Path, *args: str, timeout: float = 600) -> str:
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *args],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


@pytest.mark.frameworks_long  # PyPI: 2 to 7 min here, most of it downloads
@pytest.mark.timeout(1500)
def test_installing_the_extras_changes_neither_transformers_nor_lightning(
        tmp_path: Path) -> None:
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    # Their own dependencies do not matter here: what pip decides about these two does.
    pip(python, "install", "--quiet", "--no-deps", *(f"{n}=={v}" for n, v in HAVE.items()))
    report = tmp_path / "report.json"
    pip(python, "install", "--dry-run", "--quiet", "--report", str(report),
        f"{ROOT}[hf,lightning]")
    would = {item["metadata"]["name"].lower(): item["metadata"]["version"]
             for item in json.loads(report.read_text())["install"]}
    assert "perdure" in would, would
    changed = {name: would[name] for name in HAVE if name in would}
    assert changed == {}, f"pip would replace {HAVE} with {changed}"
