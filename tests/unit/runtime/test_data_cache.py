"""CachedVolume in one process on real files: copy on first use, hits, prefetch, LRU eviction."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import BinaryIO

import pytest

from perdure.runtime import CachedVolume
from perdure.runtime.data import ENV_MIN_FREE_BYTES, LocalSource
from perdure.runtime.data.cache import CachedFile, plan_eviction


@pytest.fixture(autouse=True)
def _room_on_any_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default the cache keeps 10% of its filesystem free, so on a nearly full disk every
    copy would be evicted at once. Tests of the threshold set their own."""
    monkeypatch.setenv(ENV_MIN_FREE_BYTES, "0")


def _make_source(root: Path, count: int, size: int) -> list[bytes]:
    contents = []
    for i in range(count):
        data = bytes([i % 251]) * size + f"file {i}".encode()
        (root / "sub").mkdir(parents=True, exist_ok=True)
        (root / "sub" / f"{i:03d}.bin").write_bytes(data)
        contents.append(data)
    return contents


class CountingSource(LocalSource):
    """A local directory that counts opens and can be told to fail."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.opens: list[str] = []
        self.fail: set[str] = set()
        self._lock = threading.Lock()

    def open(self, name: str) -> tuple[BinaryIO, int]:
        with self._lock:
            self.opens.append(name)
        if name in self.fail:
            raise OSError(f"storage error reading {name}")
        return super().open(name)


@pytest.mark.parametrize(
    ("free", "need", "min_free", "expected"),
    [
        (100, 10, 50, []),  # fits above the threshold: nothing to do
        (55, 10, 50, ["a"]),  # the least recently used goes first
        (40, 10, 50, ["a", "c"]),  # a (mtime 1) + c (mtime 2) free 25 -> 65 - 10 >= 50
        (0, 10, 50, ["a", "c", "b"]),  # not enough even with all: every file
    ],
)
def test_plan_eviction_takes_least_recently_used_first(
    free: int, need: int, min_free: int, expected: list[str]
) -> None:
    files = [CachedFile("b", 10, 3), CachedFile("a", 10, 1), CachedFile("c", 15, 2)]
    assert [f.path for f in plan_eviction(files, free, need, min_free)] == expected


def test_first_use_copies_then_hits(tmp_path: Path) -> None:
    contents = _make_source(tmp_path / "src", 3, 1000)
    source = CountingSource(tmp_path / "src")
    vol = CachedVolume(source, tmp_path / "cache", read=lambda p: Path(p).read_bytes())
    assert vol.files == ["sub/000.bin", "sub/001.bin", "sub/002.bin"]
    assert [vol[i] for i in range(3)] == contents
    assert [vol[i] for i in range(3)] == contents
    assert source.opens == vol.files  # one copy each
    assert vol.stats["copies"] == 3 and vol.stats["hits"] == 3
    local = vol.path("sub/001.bin")
    assert local.startswith(str(tmp_path / "cache")) and Path(local).read_bytes() == contents[1]


def test_prefetch_copies_in_the_background(tmp_path: Path) -> None:
    _make_source(tmp_path / "src", 6, 500)
    source = CountingSource(tmp_path / "src")
    vol = CachedVolume(source, tmp_path / "cache", prefetch_threads=3)
    vol.prefetch(range(6))
    vol.wait()
    assert all(os.path.exists(vol.local_path(i)) for i in range(6))
    hits = vol.stats["hits"]
    vol.path(4)
    assert vol.stats["hits"] == hits + 1 and len(source.opens) == 6
    vol.close()


def test_a_failed_prefetch_is_reported_and_retried_on_use(tmp_path: Path) -> None:
    _make_source(tmp_path / "src", 2, 10)
    source = CountingSource(tmp_path / "src")
    source.fail.add("sub/001.bin")
    vol = CachedVolume(source, tmp_path / "cache")
    vol.prefetch([1])
    with pytest.raises(RuntimeError, match="1 prefetch copies failed") as raised:
        vol.wait()
    assert "storage error reading sub/001.bin" in str(raised.value.__cause__)
    with pytest.raises(OSError, match="storage error"):
        vol.path(1)  # still failing: the error reaches the caller
    source.fail.clear()
    assert Path(vol.path(1)).exists()


def _three_cached(tmp_path: Path, size: int) -> CachedVolume:
    """A source of 4 files of `size` bytes and a cache holding 0-2, least recently used
    first: 1, then 0, then 2."""
    _make_source(tmp_path / "src", 4, size)
    probe = CachedVolume(tmp_path / "src", tmp_path / "cache")
    for i in range(3):
        probe.path(i)
    for age, i in enumerate([1, 0, 2]):
        os.utime(probe.local_path(i), (1000 + age, 1000 + age))
    return probe


def test_eviction_under_the_env_threshold_removes_the_least_recently_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = 8 << 20
    probe = _three_cached(tmp_path, size)
    # Copying file 3 must leave at least `threshold` free: that takes evicting exactly one
    # file (half a file of slack either way absorbs other writers on this filesystem).
    free = probe.free_bytes()
    monkeypatch.setenv(ENV_MIN_FREE_BYTES, str(free - size // 2))
    vol = CachedVolume(tmp_path / "src", tmp_path / "cache")
    assert vol.min_free_bytes() == free - size // 2
    vol.path(3)
    present = [os.path.exists(vol.local_path(i)) for i in range(4)]
    assert present == [True, False, True, True]
    assert vol.stats["evictions"] == 1


def test_a_threshold_other_data_keeps_unreachable_evicts_only_room_for_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A nearly full disk: emptying the cache cannot reach the threshold, so one copy evicts
    one least recently used file, not the files other readers are using."""
    size = 8 << 20
    probe = _three_cached(tmp_path, size)
    monkeypatch.setenv(ENV_MIN_FREE_BYTES, str(probe.free_bytes() + 100 * size))
    vol = CachedVolume(tmp_path / "src", tmp_path / "cache")
    vol.path(3)
    present = [os.path.exists(vol.local_path(i)) for i in range(4)]
    assert present == [True, False, True, True]
    assert vol.stats["evictions"] == 1


def test_threshold_defaults_to_ten_percent_and_rejects_bad_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _make_source(tmp_path / "src", 1, 1)
    monkeypatch.delenv(ENV_MIN_FREE_BYTES, raising=False)
    vol = CachedVolume(tmp_path / "src", tmp_path / "cache")
    fs = os.statvfs(tmp_path)
    assert vol.min_free_bytes() == int(fs.f_blocks * fs.f_frsize * 0.10)
    assert CachedVolume(tmp_path / "src", tmp_path / "c2", min_free_bytes=5).min_free_bytes() == 5
    monkeypatch.setenv(ENV_MIN_FREE_BYTES, "ten")
    with pytest.raises(ValueError, match=f"{ENV_MIN_FREE_BYTES}='ten' is not an integer"):
        CachedVolume(tmp_path / "src", tmp_path / "cache")


def test_names_outside_the_source_are_refused(tmp_path: Path) -> None:
    _make_source(tmp_path / "src", 1, 1)
    vol = CachedVolume(tmp_path / "src", tmp_path / "cache")
    with pytest.raises(ValueError, match="relative POSIX path"):
        vol.path("../secret")
    with pytest.raises(ValueError, match="relative POSIX path"):
        CachedVolume(tmp_path / "src", tmp_path / "cache", files=["/etc/passwd"])


def test_an_fsspec_url_is_a_source(tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe({"/perdure-test/vol/a.bin": b"alpha", "/perdure-test/vol/d/b.bin": b"beta"})
    try:
        vol = CachedVolume("memory://perdure-test/vol", tmp_path / "cache",
                           read=lambda p: Path(p).read_bytes())
        assert vol.files == ["a.bin", "d/b.bin"]
        assert [vol[0], vol[1]] == [b"alpha", b"beta"]
    finally:
        fs.rm("/perdure-test", recursive=True)
