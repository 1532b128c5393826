"""Rank 0's commit: its own files' sizes are the ones it wrote; every other rank's shard is
checked on the storage before the marker may list it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from perdure.runtime.checkpoint import commit
from perdure.runtime.checkpoint.errors import CheckpointError
from perdure.runtime.checkpoint.outcome import Shard
from perdure.runtime.checkpoint.persist import Persister, SaveStats
from perdure.runtime.checkpoint.storage import LocalStorage

DIR = commit.tmp_name(5, "t")


def commit_two_ranks(root: Path, theirs_on_disk: bytes) -> str:
    storage = LocalStorage(root)
    storage.makedirs(DIR)
    storage.write_bytes(f"{DIR}/__0_0.distcp", b"0" * 10)
    storage.write_bytes(f"{DIR}/__1_0.distcp", theirs_on_disk)
    docs = SimpleNamespace(dcp=lambda results: b"dcp", json=lambda *args: b"{}")
    job = SimpleNamespace(step=5, dir_name=DIR, docs=docs, world=2)
    outcomes = [
        Shard(None, [], {f"__{r}_0.distcp": n}, {f"__{r}_0.distcp": 0}, [], DIR)
        for r, n in ((0, 10), (1, 20))
    ]
    persister = Persister(storage, SimpleNamespace(rank=0), 2, None, None)  # type: ignore[arg-type]
    return persister._commit(job, outcomes, SaveStats(5))  # type: ignore[arg-type]


def test_another_ranks_shard_of_the_size_it_reported_is_committed(tmp_path: Path) -> None:
    assert commit_two_ranks(tmp_path, b"1" * 20) == "step-00000005"
    marker = commit.scan(LocalStorage(tmp_path)).complete[0].marker
    assert marker["files"] == {
        ".metadata": 3,
        "__0_0.distcp": 10,
        "__1_0.distcp": 20,
        "perdure.json": 2,
    }


def test_another_ranks_short_shard_is_never_committed(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"__1_0\.distcp has 19 bytes, not 20"):
        commit_two_ranks(tmp_path, b"1" * 19)
    assert commit.scan(LocalStorage(tmp_path)).complete == []
