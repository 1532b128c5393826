"""Commit markers, discovery and retention on real directories (local and fsspec memory)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from perdure.runtime.checkpoint import commit
from perdure.runtime.checkpoint.storage import FsspecStorage, LocalStorage, Storage
from perdure.runtime.checkpoint.urls import make_storage


def write_checkpoint(storage: Storage, step: int, *, marker: bool = True, tmp: bool = False) -> str:
    """A checkpoint directory with two shards, published unless told otherwise."""
    name: str = commit.tmp_name(step, commit.new_token()) if tmp else commit.final_name(step)
    storage.makedirs(name)
    files = {"__0_0.distcp": b"0" * 10, "__1_0.distcp": b"1" * 20}
    for file, data in files.items():
        storage.write_bytes(f"{name}/{file}", data)
    if marker:
        doc = commit.marker_doc(step, 2, {f: len(d) for f, d in files.items()})
        storage.write_bytes(f"{name}/{commit.MARKER}", json.dumps(doc).encode())
    return name


@pytest.fixture(params=["local", "memory"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return LocalStorage(tmp_path / "ckpt")
    return FsspecStorage(f"memory://commit-{uuid.uuid4().hex}")


def test_scan_tells_complete_from_partial_and_says_why(storage: Storage) -> None:
    write_checkpoint(storage, 1)
    write_checkpoint(storage, 2)
    write_checkpoint(storage, 3, marker=False)
    tmp = write_checkpoint(storage, 4, marker=False, tmp=True)
    write_checkpoint(storage, 5)
    storage.write_bytes("step-00000005/__1_0.distcp", b"short")
    write_checkpoint(storage, 6)
    storage.write_bytes(f"step-00000006/{commit.MARKER}", b"{not json")
    storage.makedirs("unrelated")
    storage.write_bytes("unrelated/x", b"x")

    found = commit.scan(storage)
    assert [c.step for c in found.complete] == [1, 2]
    assert found.latest is not None and found.latest.name == "step-00000002"
    reasons = {p.name: p.reason for p in found.partial}
    assert reasons["step-00000003"] == "no commit marker"
    assert reasons[tmp] == "unfinished save, no commit marker"
    assert reasons["step-00000005"] == "file __1_0.distcp has 5 bytes, the commit marker says 20"
    assert reasons["step-00000006"].startswith("commit marker unreadable")
    assert found.partial[0].describe() == (
        "skipped partial checkpoint step-00000003: no commit marker"
    )


def test_retain_keeps_the_newest_and_removes_leftovers(storage: Storage) -> None:
    for step in (1, 2, 3, 4):
        write_checkpoint(storage, step)
    leftover = write_checkpoint(storage, 9, marker=False, tmp=True)
    removed = commit.retain(storage, keep=2, current="step-00000004")
    assert sorted(removed) == ["step-00000001", "step-00000002", leftover]
    assert [c.step for c in commit.scan(storage).complete] == [3, 4]
    assert commit.scan(storage).partial == []
    assert commit.retain(storage, keep=None, current="step-00000004") == []


def test_publish_renames_where_it_can_and_replaces_a_resaved_step(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    write_checkpoint(storage, 7)
    staged = write_checkpoint(storage, 7, marker=False, tmp=True)
    storage.write_bytes(f"{staged}/__0_0.distcp", b"new")
    marker = commit.marker_doc(7, 2, {"__0_0.distcp": 3, "__1_0.distcp": 20})
    assert commit.publish(storage, staged, 7, marker) == "step-00000007"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000007"]
    assert (tmp_path / "step-00000007" / "__0_0.distcp").read_bytes() == b"new"
    assert [c.step for c in commit.scan(storage).complete] == [7]


def test_remove_checkpoint_never_leaves_a_committed_looking_remainder(storage: Storage) -> None:
    write_checkpoint(storage, 1)
    commit.remove_checkpoint(storage, "step-00000001")
    assert commit.scan(storage).complete == []
    assert storage.list_names() == []


def test_make_storage_routes_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(make_storage(tmp_path), LocalStorage)
    assert isinstance(make_storage(f"file://{tmp_path}"), LocalStorage)
    assert isinstance(make_storage("memory://x"), FsspecStorage)
    monkeypatch.setenv("PERDURE_CHECKPOINT_DIR", str(tmp_path / "env"))
    assert make_storage(None).url == str(tmp_path / "env")
    monkeypatch.delenv("PERDURE_CHECKPOINT_DIR")
    with pytest.raises(ValueError, match="PERDURE_CHECKPOINT_DIR is not set"):
        make_storage(None)


def test_retention_removes_a_checkpoint_with_files_its_marker_does_not_list(
    storage: Storage,
) -> None:
    for step in (1, 2, 3):
        write_checkpoint(storage, step)
    storage.write_bytes("step-00000001/extra.log", b"someone's notes")
    storage.makedirs("step-00000001/sub")
    storage.write_bytes("step-00000001/sub/x", b"x")
    assert commit.retain(storage, 2, "step-00000003") == ["step-00000001"]
    assert storage.list_names() == ["step-00000002", "step-00000003"]


def test_a_marker_naming_paths_outside_its_directory_deletes_nothing_there(
    tmp_path: Path,
) -> None:
    storage = LocalStorage(tmp_path / "ckpt")
    for step in (1, 2, 3):
        write_checkpoint(storage, step)
    victim = tmp_path / "ckpt" / "victim"
    victim.write_bytes(b"keep me")
    doc = commit.marker_doc(1, 2, {"__0_0.distcp": 10, "__1_0.distcp": 20, "../victim": 7})
    storage.write_bytes(f"step-00000001/{commit.MARKER}", json.dumps(doc).encode())
    assert commit.retain(storage, 2, "step-00000003") == ["step-00000001"]
    assert victim.read_bytes() == b"keep me"
    assert storage.list_names() == ["step-00000002", "step-00000003", "victim"]

