"""CachedVolume shared by several processes: one copy per file, no partial file ever visible."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import BinaryIO

import pytest

from perdure.runtime import CachedVolume, ElasticSampler
from perdure.runtime.data import ENV_MIN_FREE_BYTES, ElasticLoader, LocalSource


@pytest.fixture(autouse=True)
def _room_on_any_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default the cache keeps 10% of its filesystem free, so on a nearly full disk every
    copy would be evicted at once. Tests of the threshold set their own."""
    monkeypatch.setenv(ENV_MIN_FREE_BYTES, "0")

FILES = 16


def _make_source(root: Path) -> dict[str, bytes]:
    root.mkdir()
    contents = {}
    for i in range(FILES):
        data = os.urandom(50_000 + 997 * i)
        (root / f"{i:02d}.bin").write_bytes(data)
        contents[f"{i:02d}.bin"] = data
    return contents


class LoggedSource(LocalSource):
    """Slow storage (10 ms per open) that logs every open to a file shared by processes."""

    def __init__(self, root: Path, log: Path) -> None:
        super().__init__(root)
        self.log = str(log)

    def open(self, name: str) -> tuple[BinaryIO, int]:
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, f"{name}\n".encode())  # one small O_APPEND write: atomic
        os.close(fd)
        time.sleep(0.01)
        return super().open(name)


def _reader(source: LoggedSource, cache: str, seed: int) -> None:
    volume = CachedVolume(source, cache, read=lambda p: Path(p).read_bytes())
    order = list(range(FILES))
    random.Random(seed).shuffle(order)
    volume.prefetch(order[: FILES // 2])
    for i in order:
        data = volume[i]
        expected = Path(source.root, volume.files[i]).read_bytes()
        if data != expected:
            os._exit(3)
    volume.close()
    os._exit(0)


def test_processes_sharing_a_cache_copy_each_file_once(tmp_path: Path) -> None:
    _make_source(tmp_path / "src")
    source = LoggedSource(tmp_path / "src", tmp_path / "opens.log")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_reader, args=(source, str(tmp_path / "cache"), s))
             for s in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    opens = (tmp_path / "opens.log").read_text().split()
    assert sorted(opens) == sorted(f"{i:02d}.bin" for i in range(FILES))


def test_loader_workers_read_through_the_shared_cache(tmp_path: Path) -> None:
    contents = _make_source(tmp_path / "src")
    source = LoggedSource(tmp_path / "src", tmp_path / "opens.log")
    volume = CachedVolume(source, tmp_path / "cache", read=lambda p: Path(p).read_bytes())
    sampler = ElasticSampler(FILES, 3, rank=0, world_size=1)
    loader = ElasticLoader(volume, sampler, num_workers=2, prefetch_factor=2,
                           persistent_workers=True, collate_fn=list)
    got = [data for batch in loader for data in batch]
    assert sorted(got) == sorted(contents.values())
    assert sorted((tmp_path / "opens.log").read_text().split()) == sorted(contents)


class StallingSource(LocalSource):
    """Hands out the first 8 KiB of a file, then stalls forever (a hung network read)."""

    def open(self, name: str) -> tuple[BinaryIO, int]:
        stream, size = super().open(name)
        return _Stalling(stream), size  # type: ignore[return-value]  # reads like a file


class _Stalling:
    def __init__(self, stream: BinaryIO) -> None:
        self.stream, self.sent = stream, False

    def read(self, n: int = -1) -> bytes:
        if self.sent:
            time.sleep(3600)
        self.sent = True
        return self.stream.read(8192)

    def __enter__(self) -> _Stalling:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.close()


def _stalled_copier(root: str, cache: str) -> None:
    CachedVolume(StallingSource(root), cache).path("03.bin")


def test_a_copier_killed_mid_copy_leaves_no_file_under_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    contents = _make_source(tmp_path / "src")
    cache = tmp_path / "cache"
    child = mp.get_context("fork").Process(
        target=_stalled_copier, args=(str(tmp_path / "src"), str(cache)))
    child.start()
    temps = cache / ".perdure" / "tmp"
    deadline = time.monotonic() + 30
    while not (temps.exists() and any(f.stat().st_size > 0 for f in temps.iterdir())):
        assert time.monotonic() < deadline, "the copier never started writing"
        time.sleep(0.01)
    volume = CachedVolume(tmp_path / "src", cache)
    assert not Path(volume.local_path("03.bin")).exists()  # mid-copy: nothing visible
    os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    child.join()
    assert not Path(volume.local_path("03.bin")).exists()
    assert Path(volume.path("03.bin")).read_bytes() == contents["03.bin"]  # lock was freed

    # The killed copier's temp file goes at the next eviction pass once it is stale.
    (stale,) = list(temps.iterdir())
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    monkeypatch.setenv(ENV_MIN_FREE_BYTES, str(volume.free_bytes() + (1 << 40)))
    CachedVolume(tmp_path / "src", cache).path("04.bin")  # evicts all it can, copies anyway
    assert list(temps.iterdir()) == []
    assert not Path(volume.local_path("03.bin")).exists()


class DelayedSource(LocalSource):
    """Storage that takes half a second to open a file."""

    def open(self, name: str) -> tuple[BinaryIO, int]:
        time.sleep(0.5)
        return super().open(name)


def test_a_fork_during_a_background_copy_does_not_keep_its_lock(tmp_path: Path) -> None:
    # DataLoader workers are forked while prefetch threads copy; a child must not inherit
    # (and hold for its whole life) the lock of a copy in flight.
    _make_source(tmp_path / "src")
    volume = CachedVolume(DelayedSource(tmp_path / "src"), tmp_path / "cache")
    volume.prefetch(["00.bin"])
    locks = tmp_path / "cache" / ".perdure" / "locks"
    while not (locks.exists() and any(locks.iterdir())):
        time.sleep(0.005)  # the prefetch thread holds the lock while storage answers
    child = mp.get_context("fork").Process(target=time.sleep, args=(20,))
    child.start()
    try:
        volume.wait()
        os.unlink(volume.local_path("00.bin"))
        again = threading.Thread(target=volume.path, args=("00.bin",), daemon=True)
        again.start()
        again.join(timeout=5)
        assert not again.is_alive(), "the forked child still holds the file's copy lock"
    finally:
        child.kill()
        child.join()
