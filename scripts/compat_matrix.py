"""The compatibility matrix: one venv per cell (a torch minor, a framework's end), its tests run
in it, a table of what passed.

    python3 scripts/compat_matrix.py                  # every cell (make test-compat)
    python3 scripts/compat_matrix.py --cells 'torch-2.6,torch-2.14' --groups unit,integration
    python3 scripts/compat_matrix.py --list           # the cells and groups, nothing run
    python3 scripts/compat_matrix.py --docs-only      # regenerate docs/guides/versions.md

Venvs live in $PERDURE_COMPAT_DIR (default ~/.cache/perdure-compat), one folder per cell, built
from the registry's wheels on first use and reused while the cell's requirements are the same
(a stamp file holds them). Each torch wheel brings its CUDA libraries: ~4-7 GB a venv;
`--prune` removes a cell's venv once its tests ran. A cell with a `base` (a framework's floor
at the torch floor) is a small venv layered on its base cell's: a .pth file puts the base's
site-packages after its own, so it has the base's torch without a second download, and pip
installs only what the base lacks. Tests run with this checkout's sources
(PYTHONPATH=src, and a .pth file for the subprocesses that set their own env). The results of
the cells run are merged into docs/compat-matrix.json, from which docs/guides/versions.md's
"Supported versions" table is generated (a unit test fails when the page is stale). Exits 1
when a test failed in any cell run.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "compat-matrix.json"
PAGE = ROOT / "docs" / "guides" / "versions.md"
README = ROOT / "README.md"

# What every cell's venv has besides its own requirements: perdure's dependencies (but torch)
# and what its tests import; perdure itself comes from this checkout's src.
COMMON = ["numpy>=1.24", "pydantic>=2.5", "pyyaml>=6", "typer>=0.12", "rich>=13", "psutil>=5.9",
          "fsspec>=2024.2", "crc32c>=2.7", "pytest>=8", "pytest-timeout>=2.2",
          "hypothesis>=6.90", "httpx>=0.27"]
DEFAULT_TORCH = "torch==2.13.0"  # the framework cells' torch: the Makefile's

# The test groups: pytest selections, or a command whose exit status is the one result.
RUNTIME_UNIT = ["tests/unit/runtime", "tests/unit/test_versions.py"]
RUNTIME_INTEGRATION = ["tests/integration/runtime",
                       "--deselect", "tests/integration/runtime/test_checkpoint_s3.py",
                       "--deselect", "tests/integration/runtime/test_checkpoint_s3_kill.py",
                       "--deselect", "tests/integration/runtime/test_data_s3.py",
                       "--deselect", "tests/integration/runtime/test_s3_config_errors.py"]
DEMO = ["examples/ddp_mlp/demo.py"]  # a command: exit 0 iff the faulty run's weights are exact
# CI's selection (.ci/run, at the floor and the newest torch): the version checks, exact resume,
# DDP and FSDP2 saves restored onto another world size, the data path, an elastic resize.
QUICK = ["tests/unit/runtime/test_compat.py", "tests/unit/test_versions.py",
         "tests/unit/runtime/test_data_cpu_states.py",
         "tests/integration/runtime/test_checkpoint_api.py",
         "tests/integration/runtime/test_checkpoint_ddp.py",
         "tests/integration/runtime/test_checkpoint_reshard.py",
         "tests/integration/runtime/test_data_distributed.py",
         "tests/integration/runtime/test_resume.py",
         "tests/integration/runtime/test_elastic_resize.py"]
TORCH_GROUPS = {"unit": RUNTIME_UNIT, "integration": RUNTIME_INTEGRATION, "demo": DEMO,
                "quick": QUICK}
OPTIONAL_GROUPS = {"quick"}  # run only when --groups names them
# The frameworks' exactness tests (kill, preemption, another world size) are frameworks_long,
# which pyproject's addopts leaves out: a framework cell runs every test of its files.
EVERY_MARK = ["-m", "frameworks_long or not frameworks_long"]
HF = [*EVERY_MARK, "tests/integration/frameworks/test_transformers_callback.py",
      "tests/integration/frameworks/test_transformers_trainer.py"]
LIGHTNING = [*EVERY_MARK, "tests/integration/frameworks/test_lightning.py"]
# Every Ray test, ray_long ones included, but those that need more than the ray extra: S3
# (s3fs) and the benchmark against Ray Train (the bench-ray extra).
RAY = ["-m", "ray_long or not ray_long", "tests/integration/ray",
       "--deselect", "tests/integration/ray/test_ray_s3.py",
       "--deselect", "tests/integration/ray/test_ray_bench.py"]


@dataclass(frozen=True)
class Cell:
    """One venv: its name, what pip installs in it, and its test groups."""

    name: str
    requirements: list[str]
    groups: dict[str, list[str]] = field(default_factory=dict)
    versions: tuple[str, ...] = ("torch",)  # the packages whose versions the table shows
    base: str | None = None  # the cell whose venv this one layers on (its torch and COMMON)


# The matrix: every torch minor from the floor to the newest that installs (pyproject's range),
# then the frameworks' ends, each with the Makefile's torch.
TORCH_RELEASES = ["2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0",
                  "2.14.1"]
CELLS = [
    *[Cell(f"torch-{v.rsplit('.', 1)[0]}", [f"torch=={v}"], TORCH_GROUPS)
      for v in TORCH_RELEASES],
    Cell("transformers-4.57", [DEFAULT_TORCH, "transformers>=4.57,<4.58",
                               "accelerate>=1.10,<1.11"], {"frameworks": HF},
         ("torch", "transformers", "accelerate")),
    Cell("transformers-5.25", [DEFAULT_TORCH, "transformers>=5.25,<5.26",
                               "accelerate>=1.16,<1.17"], {"frameworks": HF},
         ("torch", "transformers", "accelerate")),
    Cell("lightning-2.4", [DEFAULT_TORCH, "lightning==2.4.0"], {"frameworks": LIGHTNING},
         ("torch", "lightning")),
    Cell("lightning-2.6", [DEFAULT_TORCH, "lightning==2.6.6"], {"frameworks": LIGHTNING},
         ("torch", "lightning")),
    # The frameworks' floors at the torch floor, layered on the torch-2.6 venv.
    Cell("torch-2.6-hf", ["transformers>=4.57,<4.58", "accelerate>=1.10,<1.11"],
         {"frameworks": HF}, ("torch", "transformers", "accelerate"), base="torch-2.6"),
    Cell("torch-2.6-lightning", ["lightning==2.4.0"], {"frameworks": LIGHTNING},
         ("torch", "lightning"), base="torch-2.6"),
    # The frameworks' newest on the newest torch, layered on the torch-2.14 venv.
    Cell("torch-2.14-hf", ["transformers>=5.25,<5.26", "accelerate>=1.16,<1.17"],
         {"frameworks": HF}, ("torch", "transformers", "accelerate"), base="torch-2.14"),
    Cell("torch-2.14-lightning", ["lightning==2.6.6"], {"frameworks": LIGHTNING},
         ("torch", "lightning"), base="torch-2.14"),
    # transformers' floor at a mid-range torch (the issue's torch 2.10 user on transformers 4.57)
    Cell("torch-2.10-hf", ["transformers>=4.57,<4.58", "accelerate>=1.10,<1.11"],
         {"frameworks": HF}, ("torch", "transformers", "accelerate"), base="torch-2.10"),
    # Ray's floor and newest here, 2.60 (pyproject's ray extra), and 2.50, which the backend is
    # made for but whose cell passed 22 of 32 (2026-12-06); PERDURE_TEST_OTHER_RAY naming the
    # other cell's `ray` command runs the version-mismatch test too.
    Cell("ray-2.50", [DEFAULT_TORCH, "ray==2.50.1"], {"ray": RAY}, ("torch", "ray")),
    Cell("ray-2.60", [DEFAULT_TORCH, "ray==2.60.0"], {"ray": RAY}, ("torch", "ray")),
]


def cache_dir() -> Path:
    return Path(os.environ.get("PERDURE_COMPAT_DIR", Path.home() / ".cache" / "perdure-compat"))


def venv_of(cell: Cell) -> Path:
    return cache_dir() / cell.name


# GBs of CUDA wheels per torch cell: a slow or dropped download is retried, not a failed cell.
PIP = ["-q", "--retries", "10", "--timeout", "120"]


def cell_named(name: str) -> Cell:
    return next(c for c in CELLS if c.name == name)


def site_packages(venv: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                               text=True, check=True).stdout.strip())


def build(cell: Cell, log: Path) -> float:
    """Make (or reuse) the cell's venv, and its base's first; the seconds it took (0 when
    reused)."""
    began = time.monotonic()
    base = cell_named(cell.base) if cell.base else None
    took = build(base, log) if base else 0.0
    venv = venv_of(cell)
    stamp = venv / ".perdure-compat"
    wanted = json.dumps([*cell.requirements, *COMMON])
    if base:  # a new base venv makes a new layer
        wanted = json.dumps([(venv_of(base) / ".perdure-compat").read_text(), cell.requirements])
    if stamp.exists() and stamp.read_text() == wanted:
        return took
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    pip = [str(venv / "bin" / "pip"), "install", *PIP]
    with log.open("a") as out:
        def run(command: list[str]) -> None:
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=True)

        # a layer's Python is its base's: the base's compiled wheels are for that version
        python = str(venv_of(base) / "bin" / "python") if base else sys.executable
        run([python, "-m", "venv", str(venv)])
        if base:
            # after the layer's own site-packages on sys.path: pip sees the base's packages
            # as installed and leaves them there, what it adds or upgrades goes in the layer
            (site_packages(venv) / "perdure_compat_base.pth").write_text(
                f"{site_packages(venv_of(base))}\n")
            run([*pip, *cell.requirements])
        else:
            run([*pip, *cell.requirements])
            run([*pip, *COMMON])
    stamp.write_text(wanted)
    return time.monotonic() - began


def installed(cell: Cell) -> dict[str, str]:
    """The versions of the cell's packages in its venv."""
    code = ("import json, importlib.metadata as m, sys; "
            "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))")
    out = subprocess.run([str(venv_of(cell) / "bin" / "python"), "-c", code, *cell.versions],
                         capture_output=True, text=True, check=True).stdout
    return dict(json.loads(out))


_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected)")


def counts(output: str) -> dict[str, int]:
    """passed / failed / skipped from pytest's closing line (errors count as failed). No side
    effects."""
    closing = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed|error)",
                                                                 line)]
    got = {"passed": 0, "failed": 0, "skipped": 0}
    for number, word in _COUNT.findall(closing[-1] if closing else ""):
        key = "failed" if word.startswith("error") else word
        if key in got:
            got[key] += int(number)
    return got


def use_this_checkout(cell: Cell) -> None:
    """Put this checkout's src on the cell's sys.path by a .pth file, as an editable install
    would: PYTHONPATH alone does not reach a test's subprocess started with an env of its own.
    Rewritten before each group, so it names the checkout that runs the cell."""
    (site_packages(venv_of(cell)) / "perdure_checkout.pth").write_text(f"{ROOT / 'src'}\n")


def run_group(cell: Cell, group: str, selection: list[str], log: Path,
              timeout: float) -> dict[str, int]:
    use_this_checkout(cell)
    python = str(venv_of(cell) / "bin" / "python")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = f"{venv_of(cell) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    script = selection[0].endswith(".py") and selection[0].startswith("examples/")
    command = ([python, *selection] if script else
               [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection])
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {timeout} s", -1
    with log.open("a") as out:
        out.write(f"\n===== {cell.name} / {group}: {' '.join(command)} (exit {code})\n{output}")
    if script:
        return {"passed": int(code == 0), "failed": int(code != 0), "skipped": 0}
    got = counts(output)
    if code not in (0, 5) and got["failed"] == 0:  # it stopped before its closing line
        got["failed"] = 1
    return got


def table(results: dict[str, dict[str, object]], names: list[str]) -> str:
    """The printed table: a row per cell, a column per group (passed/failed). No side
    effects."""
    groups = sorted({g for n in names for g in results[n]["groups"]})  # type: ignore[union-attr]
    rows = [["cell", "versions", *groups]]
    for name in names:
        cell = results[name]
        versions = " ".join(f"{k} {v}" for k, v in cell["versions"].items())  # type: ignore[union-attr]
        row = [name, versions]
        for group in groups:
            got = cell["groups"].get(group)  # type: ignore[union-attr]
            row.append("-" if got is None else
                       f"{got['passed']} passed" + (f", {got['failed']} FAILED"
                                                     if got["failed"] else ""))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


# ---- the docs page ---------------------------------------------------------------------------

def declared() -> dict[str, str]:
    """The version ranges pyproject.toml declares: python, torch, and each extra's packages."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {"python": project["requires-python"]}
    for dep in [*project["dependencies"],
                *[d for extra in project["optional-dependencies"].values() for d in extra]]:
        found = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", dep)
        assert found is not None
        name = found[1].lower()
        if name in ("torch", "transformers", "accelerate", "lightning", "ray"):
            out.setdefault(name, found[3] or "any")
    return out


def page(results: dict[str, dict[str, object]]) -> str:
    """docs/guides/versions.md, from pyproject's ranges and the matrix's last results. No side
    effects."""
    lines = ["# Supported versions", "",
             "<!-- Generated by scripts/compat_matrix.py from pyproject.toml and",
             "     docs/compat-matrix.json: edit those, then `python3 scripts/compat_matrix.py",
             "     --docs-only`. A unit test fails when this page is stale. -->", "",
             "perdure declares these ranges (pyproject.toml); `import perdure` refuses a torch",
             "outside its range with one line naming both versions.", "",
             "| package | supported |", "| --- | --- |"]
    lines += [f"| {name} | `{spec}` |" for name, spec in declared().items()]
    lines += ["", "Every version-dependent or private torch API perdure uses goes through",
              "`perdure.runtime.compat`, which detects what the installed torch has; its "
              "docstring says",
              "which versions take which path. To support a new torch minor: add its release "
              "to",
              "`TORCH_RELEASES` in scripts/compat_matrix.py, run `make test-compat "
              "CELLS=torch-2.N`, then",
              "raise the bound in pyproject.toml and src/perdure/versions.py together."]
    lines += ["", "## The last compatibility matrix run", "",
              "Each row is a venv built from the registry's wheels; each column a group of "
              "tests run in it",
              "(unit: tests/unit/runtime; integration: tests/integration/runtime without S3; "
              "demo:",
              "examples/ddp_mlp/demo.py, the kill/preempt/controller-crash run that must end "
              "with exact",
              "weights; frameworks and ray: their integration tests). Run it with "
              "`make test-compat`.", "",
              "| cell | versions | tests | result |", "| --- | --- | --- | --- |"]
    for name, cell in results.items():
        versions = ", ".join(f"{k} {v}" for k, v in cell["versions"].items())  # type: ignore[union-attr]
        for group, got in sorted(cell["groups"].items()):  # type: ignore[union-attr]
            verdict = "passed" if got["failed"] == 0 and got["passed"] else "FAILED"
            lines.append(f"| {name} | {versions} | {group} | {verdict}: {got['passed']} passed, "
                         f"{got['failed']} failed |")
    return "\n".join(lines) + "\n"


README_START = "<!-- supported-versions: generated by scripts/compat_matrix.py -->"
README_END = "<!-- /supported-versions -->"


def tested(results: dict[str, dict[str, object]]) -> dict[str, list[str]]:
    """Each package's versions that some cell ran with every one of its groups passing."""
    out: dict[str, set[str]] = {}
    for cell in results.values():
        groups = cell["groups"].values()  # type: ignore[union-attr]
        if groups and all(g["failed"] == 0 and g["passed"] for g in groups):
            for name, version in cell["versions"].items():  # type: ignore[union-attr]
                out.setdefault(name, set()).add(version)
    return {name: sorted(vs, key=lambda v: [int(x) if x.isdigit() else x
                                             for x in re.split(r"[.+]", v)])
            for name, vs in out.items()}


def readme_block(results: dict[str, dict[str, object]]) -> str:
    """README's "Supported versions" table: pyproject's ranges and the versions the last
    matrix run passed on. No side effects."""
    passed = tested(results)
    pinned = dict(re.findall(r"(?m)^([a-z]+)==(\S+)$", (ROOT / "constraints.txt").read_text()))
    lines = [README_START, "",
             "| package | supported (pyproject.toml) | the matrix's cells, all passed "
             "| the default test venv (constraints.txt) |", "| --- | --- | --- | --- |"]
    for name, spec in declared().items():
        cells = ", ".join(passed.get(name, [])) or "-"
        if name == "python":
            cells = "3.11 (the only CPython installable on the test machine)"
        lines.append(f"| {name} | `{spec}` | {cells} | {pinned.get(name, '3.11')} |")
    lines += ["", README_END]
    return "\n".join(lines)


def readme(text: str, results: dict[str, dict[str, object]]) -> str:
    """`text` (README.md) with its generated block replaced."""
    head, rest = text.split(README_START, 1)
    return head + readme_block(results) + rest.split(README_END, 1)[1]


def load_results() -> dict[str, dict[str, object]]:
    if not RESULTS.exists():
        return {}
    return dict(json.loads(RESULTS.read_text())["cells"])


def save_results(results: dict[str, dict[str, object]]) -> None:
    order = [c.name for c in CELLS]
    ordered = {n: results[n] for n in sorted(results, key=lambda n: (
        order.index(n) if n in order else len(order), n))}
    RESULTS.write_text(json.dumps({"command": "make test-compat", "cells": ordered},
                                  indent=1) + "\n")
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(page(ordered))
    README.write_text(readme(README.read_text(), ordered))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", default="*", help="comma-separated names or globs (--list)")
    p.add_argument("--groups", default=None,
                   help=f"comma-separated groups (default: all but {sorted(OPTIONAL_GROUPS)})")
    p.add_argument("--list", action="store_true", help="print the cells and their groups")
    p.add_argument("--prune", action="store_true", help="remove each venv after its tests")
    p.add_argument("--docs-only", action="store_true",
                   help="regenerate the docs page and README's table only")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per group at most")
    args = p.parse_args()
    if args.docs_only:
        save_results(load_results())
        return 0
    patterns = args.cells.split(",")
    cells = [c for c in CELLS if any(fnmatch.fnmatch(c.name, pat) for pat in patterns)]
    if not cells:
        raise SystemExit(f"--cells {args.cells!r} matches no cell; see --list")
    wanted_groups = args.groups.split(",") if args.groups else None
    if args.list:
        for c in cells:
            print(f"{c.name:20} {' '.join(c.requirements):60} {', '.join(c.groups)}")
        return 0
    log = cache_dir() / "compat-matrix.log"
    cache_dir().mkdir(parents=True, exist_ok=True)
    print(f"venvs in {cache_dir()}; full output in {log}", flush=True)
    results = load_results()
    totals = {"passed": 0, "failed": 0}
    for cell in cells:
        seconds = build(cell, log)
        print(f"{cell.name}: venv {'reused' if not seconds else f'built in {seconds:.0f} s'}",
              flush=True)
        record: dict[str, object] = {"versions": installed(cell), "groups": {}}
        previous = results.get(cell.name, {}).get("groups", {})  # type: ignore[union-attr]
        groups: dict[str, object] = dict(previous)  # type: ignore[arg-type]
        for group, selection in cell.groups.items():
            if (group in OPTIONAL_GROUPS if wanted_groups is None
                    else not any(fnmatch.fnmatch(group, g) for g in wanted_groups)):
                continue
            began = time.monotonic()
            got = run_group(cell, group, selection, log, args.timeout)
            totals["passed"] += got["passed"]
            totals["failed"] += got["failed"]
            groups[group] = got
            print(f"  {group}: {got['passed']} passed, {got['failed']} failed, "
                  f"{got['skipped']} skipped ({time.monotonic() - began:.0f} s)", flush=True)
        record["groups"] = groups
        results = load_results()  # as it is now: another run may have written other cells
        results[cell.name] = record
        save_results(results)
        if args.prune and not any(c.base == cell.name for c in cells):
            shutil.rmtree(venv_of(cell), ignore_errors=True)
    print()
    print(table(results, [c.name for c in cells if c.name in results]))
    print(f"compat: {totals['passed']} passed, {totals['failed']} failed")
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
