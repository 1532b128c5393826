"""The runtime's goodput reporter: what a replica appends to progress.jsonl, and when."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from perdure.runtime import goodput


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_steps_are_folded_and_checkpoint_records_are_written_at_once(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    r = goodput.Reporter(path)
    assert [x["kind"] for x in records(path)] == ["start"]
    for n in (1, 2, 3):
        r.step(n, 0.01)
    assert [x["kind"] for x in records(path)] == ["start"]  # buffered: no write per step
    r.emit("checkpoint_save", step=3, seconds=0.2)  # flushes, with the steps before it
    kinds = records(path)
    assert [x["kind"] for x in kinds] == ["start", "steps", "checkpoint_save"]
    assert (kinds[1]["first"], kinds[1]["last"], kinds[1]["count"]) == (1, 3, 3)
    assert abs(float(kinds[1]["seconds"]) - 0.03) < 1e-9  # type: ignore[arg-type]


def test_steps_reach_the_file_within_the_flush_interval(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    r = goodput.Reporter(path)
    r.step(1, 0.01)
    time.sleep(goodput.FLUSH_EVERY + 0.05)
    r.step(2, 0.01)  # a step after the interval appends everything pending
    steps = [x for x in records(path) if x["kind"] == "steps"]
    assert [(x["first"], x["last"]) for x in steps] == [(1, 2)]


def test_nothing_is_written_outside_perdure(tmp_path: Path) -> None:
    r = goodput.Reporter(None)
    r.step(1, 0.01)
    r.emit("restore", step=None, seconds=0.0)
    r.flush()
    assert list(tmp_path.iterdir()) == []


def test_restores_say_where_they_came_from(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "progress.jsonl"
    r = goodput.Reporter(path)
    monkeypatch.setattr(goodput, "reporter", lambda: r)
    goodput.checkpoint_restored(None, 0.0)
    goodput.checkpoint_restored(40, 1.5)
    for where in ("file", "peer:worker-3", "memory"):
        goodput.snapshot_restored(42, 0.1, where)
    got = [(x["step"], x["source"]) for x in records(path) if x["kind"] == "restore"]
    assert got == [(None, "scratch"), (40, "checkpoint"), (42, "snapshot-local"),
                   (42, "snapshot-peer"), (42, "snapshot-memory")]
