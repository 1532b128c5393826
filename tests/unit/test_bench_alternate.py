"""bench/alternate.py --variants: each variant's phases are compared only with the bare phases
beside them, so that variants measured in one job see the same machine."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _alternate() -> ModuleType:
    path = ROOT / "bench" / "alternate.py"
    spec = importlib.util.spec_from_file_location("bench_alternate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_alternate"] = module
    spec.loader.exec_module(module)
    return module


def _phases(kinds_and_times: list[tuple[str, float]]) -> list[dict[str, object]]:
    return [{"phase": i, "kind": kind, "t": t, "cpu": t / 2}
            for i, (kind, t) in enumerate(kinds_and_times)]


def test_each_variant_is_divided_by_the_bare_phases_beside_it() -> None:
    bench = _alternate()
    lines = _phases([("bare", 9.0), ("save", 9.0),  # warm-up: left out
                     ("bare", 1.0), ("save", 1.5), ("bare", 2.0), ("burn-idle", 2.2),
                     ("bare", 2.4), ("save", 3.3), ("bare", 4.2)])
    got = bench.compare(lines)
    assert set(got) == {"save", "burn-idle"}
    assert got["save"]["t"] == pytest.approx([1.5 / 1.5, 3.3 / 3.3])
    assert got["save"]["excess"] == pytest.approx([0.0, 0.0])
    assert got["burn-idle"]["t"] == pytest.approx([2.2 / 2.2])
    assert got["burn-idle"]["cpu"] == pytest.approx([1.0])


def test_saves_per_phase_counts_saves_and_burns_only() -> None:
    bench = _alternate()
    assert bench.saves_per_phase("loader,goodput,save", 400, 100) == 4
    assert bench.saves_per_phase("burn-thread", 200, 25) == 8
    assert bench.saves_per_phase("loader,goodput", 400, 100) == 0
