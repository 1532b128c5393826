"""Every bench/ script imports as `python bench/X.py` runs it (its folder first on sys.path,
whatever it adds there itself): a helper moved elsewhere in the tests broke bench/frameworks.py
once, and nothing ran it until a benchmark was due."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"

# One interpreter loads every script in turn, each from a clean sys.path and module table (so
# that one script's path entries or helpers cannot hide another's missing import); only the
# module top level runs, never main().
PROBE = """
import importlib.util, sys
root, scripts = sys.argv[1], sys.argv[2:]
base_path = list(sys.path)
failed = []
for path in scripts:
    sys.path[:] = [path.rsplit("/", 1)[0], *base_path]
    for name, mod in list(sys.modules.items()):  # the repo's bare-named helpers only
        if (getattr(mod, "__file__", None) or "").startswith(
                tuple(f"{root}/{d}/" for d in ("bench", "tests", "examples"))):
            del sys.modules[name]
    name = path.rsplit("/", 1)[1][:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        failed.append(f"{path}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_bench_script_imports_as_run(tmp_path: Path) -> None:
    scripts = sorted(str(p) for p in BENCH.glob("*.py"))
    assert len(scripts) > 20
    # run from elsewhere: `-c` puts the working directory first on sys.path, and the repository
    # root there would hide a script that cannot find tests.helpers on its own
    done = subprocess.run([sys.executable, "-c", PROBE, str(BENCH.parent), *scripts],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
