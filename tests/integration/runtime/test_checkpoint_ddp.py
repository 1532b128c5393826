"""Async saves while DDP trains: no deadlock, replicated tensors written once, per-rank values."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def test_async_saves_during_ddp_training(
    run_ranks: Callable[..., Any], tmp_path: Path
) -> None:
    ckpt_dir = tmp_path / "ckpt"
    results = run_ranks("ddp_train", 2, {"dir": str(ckpt_dir), "steps": 12, "every": 2,
                                         "hidden": 256})
    for rank, r in enumerate(results):
        assert r["saved"] == [2, 4, 6, 8, 10, 12]
        assert r["steps"] == [10, 12]  # keep=2
        assert r["restored"] == 12 and r["state_step"] == 12
        assert r["diff"] is None
        assert r["rng_rank"] == rank  # a RankLocal value comes back to its own rank

    assert results[0]["timed_saves"] == results[1]["timed_saves"] != []

    # DDP replicates every tensor; each is written by one rank only.
    on_disk = sum(f.stat().st_size for f in (ckpt_dir / "step-00000012").glob("*.distcp"))
    state_bytes = results[0]["state_bytes"]
    assert state_bytes > 500_000
    assert on_disk < 1.2 * state_bytes, (on_disk, state_bytes)
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step-00000010", "step-00000012"]


def test_a_small_replicated_state_is_written_by_rank_0_alone(
    run_ranks: Callable[..., Any], tmp_path: Path
) -> None:
    # Below SINGLE_WRITER_BYTES a second file costs more than it saves: rank 1 writes none.
    results = run_ranks("single_writer", 2, {"dir": str(tmp_path)})
    docs = [".metadata", "COMMITTED", "perdure.json"]
    for r in results:
        assert r["small_files"] == sorted([*docs, "__0_0.distcp"])
        assert r["big_files"] == sorted([*docs, "__0_0.distcp", "__1_0.distcp"])
        assert r["small_diff"] is None and r["big_diff"] is None
    assert results[0]["alone_step"] == 2 and results[0]["alone_diff"] is None
