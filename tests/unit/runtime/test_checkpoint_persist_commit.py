"""Rank 0's commit: every shard is checked on the storage before the marker may list it."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch.distributed.checkpoint.metadata import Metadata

from perdure.runtime.checkpoint import commit
from perdure.runtime.checkpoint.errors import CheckpointError
from perdure.runtime.checkpoint.persist import Persister, SaveStats, Shard
from perdure.runtime.checkpoint.storage import FsspecStorage, LocalStorage, Storage

DIR = commit.tmp_name(5, "t")


def commit_two_ranks(
    storage: Storage, theirs_on_disk: bytes, mine_on_disk: bytes = b"0" * 10
) -> str:
    storage.makedirs(DIR)
    storage.write_bytes(f"{DIR}/__0_0.distcp", mine_on_disk)
    storage.write_bytes(f"{DIR}/__1_0.distcp", theirs_on_disk)
    job = SimpleNamespace(step=5, dir_name=DIR, metadata=Metadata(state_dict_metadata={}),
                          paths={}, world=2)
    outcomes = [
        Shard(None, [], {f"__{r}_0.distcp": n}, {f"__{r}_0.distcp": 0}, [], DIR)
        for r, n in ((0, 10), (1, 20))
    ]
    persister = Persister(storage, SimpleNamespace(rank=0), 2, None, None)  # type: ignore[arg-type]
    return persister._commit(job, outcomes, SaveStats(5))  # type: ignore[arg-type]


def test_another_ranks_shard_of_the_size_it_reported_is_committed(tmp_path: Path) -> None:
    assert commit_two_ranks(LocalStorage(tmp_path), b"1" * 20) == "step-00000005"
    marker = commit.scan(LocalStorage(tmp_path)).complete[0].marker
    assert {f: n for f, n in marker["files"].items() if f.endswith(".distcp")} == {
        "__0_0.distcp": 10, "__1_0.distcp": 20}


def test_another_ranks_short_shard_is_never_committed(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"__1_0\.distcp has 19 bytes, not 20"):
        commit_two_ranks(LocalStorage(tmp_path), b"1" * 19)
    assert commit.scan(LocalStorage(tmp_path)).complete == []


def test_on_an_object_store_rank_0s_own_shard_is_checked_too() -> None:
    storage = FsspecStorage(f"memory://commit-{uuid.uuid4().hex}")
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp has 9 bytes, not 10"):
        commit_two_ranks(storage, b"1" * 20, mine_on_disk=b"0" * 9)
    assert commit.scan(storage).complete == []
