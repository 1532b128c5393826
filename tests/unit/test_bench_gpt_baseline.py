"""bench/recovery.py --workload gpt: the torchrun baseline trains on the very token windows
examples/gpt reads through perdure's cache (same shards, same sample -> window map), so the
two systems' step times and goodput compare like for like."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch

ROOT = Path(__file__).resolve().parents[2]


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_baseline_batches_are_the_examples_windows(tmp_path: Path) -> None:
    baseline = _module(ROOT / "bench" / "recovery_gpt.py", "bench_recovery_gpt")
    data = baseline.load_example("data")
    baseline.prepare(tmp_path / "shards")
    windows = data.TokenWindows(tmp_path / "shards", tmp_path / "cache", baseline.PER_SHARD,
                                baseline.SEQ)
    shards = baseline.Shards(tmp_path / "shards")
    total = len(windows)
    assert total == baseline.SHARDS * baseline.PER_SHARD
    for first in (0, baseline.PER_SHARD - 2, total - 1, 5 * total + 3):  # across shards, wraps
        x, y = shards.batch(first)
        assert x.shape == (baseline.BATCH, baseline.SEQ)
        for j in range(baseline.BATCH):
            want_x, want_y = windows[(first + j) % total]
            assert torch.equal(x[j], want_x) and torch.equal(y[j], want_y)
