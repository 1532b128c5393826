"""Data pipeline benchmarks: the cached volume against raw reads, and prefetch over slow storage.

    flock /tmp/perdure-bench.lock .venv/bin/python bench/data.py [--files 256] [--file-kib 1024]

Every figure is printed with a baseline measured in the same run:
- second epoch: reading every file through CachedVolume (path lookup, LRU touch, read) once
  the cache is full, against reading the same files straight from local disk, in the same
  shuffled order; "warm" with the files in the page cache, "cold" after dropping both the
  source and the cached copies from the page cache (posix_fadvise DONTNEED) before each pass;
- first epoch over slow storage (every file open costs 20 ms more): a consumer that computes
  50 ms per batch, through ElasticLoader over a CachedVolume; the time the loop waits for each
  batch, as a share of its step time, with the loader's prefetch on and off, and against the
  floor of the same loop over a cache that is already full (the wait that is left is reading
  local files and the DataLoader's own work, not storage).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

from pagecache import drop_cache

from perdure.runtime import CachedVolume, ElasticSampler
from perdure.runtime.data import ElasticLoader, LocalSource


def make_files(root: Path, count: int, size: int) -> None:
    root.mkdir(parents=True)
    block = os.urandom(size)
    for i in range(count):
        (root / f"{i:05d}.bin").write_bytes(block[i:] + block[:i])


def read_all(path: str) -> int:
    with open(path, "rb", buffering=0) as f:
        total = 0
        while chunk := f.read(1 << 20):
            total += len(chunk)
    return total


def second_epoch(work: Path, count: int, size: int, rounds: int) -> None:
    src = work / "src"
    make_files(src, count, size)
    volume = CachedVolume(src, work / "cache", read=read_all)
    order = list(range(count))
    random.Random(0).shuffle(order)
    for i in order:  # epoch 1 fills the cache
        volume[i]
    raw_paths = [str(src / volume.files[i]) for i in order]
    cached_paths = [volume.local_path(i) for i in order]
    total_mb = count * size / 1e6
    print(f"second epoch: {count} files x {size // 1024} KiB = {total_mb:.0f} MB; each pass "
          f"reads all of them; {rounds} raw/cached pass pairs, ratio = raw time / cached time")
    for mode in ("warm", "cold"):
        raw: list[float] = []
        cached: list[float] = []
        for _ in range(rounds):
            for kind, out in (("raw", raw), ("cached", cached)):
                if mode == "cold":
                    drop_cache(raw_paths + cached_paths)
                start = time.perf_counter()
                if kind == "raw":
                    for path in raw_paths:
                        read_all(path)
                else:
                    for i in order:
                        volume[i]
                out.append(time.perf_counter() - start)
        # Pairs run back to back share the machine's load at that moment: compare within them.
        ratios = sorted(r / c for r, c in zip(raw, cached, strict=True))
        print(f"  {mode:4s}: raw local reads {total_mb / statistics.median(raw):7.0f} MB/s | "
              f"CachedVolume {total_mb / statistics.median(cached):7.0f} MB/s | ratio median "
              f"{statistics.median(ratios):.3f} (pairs {ratios[0]:.3f}..{ratios[-1]:.3f}; "
              f"goal >= 0.90)")


class SlowSource(LocalSource):
    """A local directory that takes 20 ms more to open each file (network storage)."""

    delay_s = 0.020

    def open(self, name: str) -> tuple[BinaryIO, int]:
        time.sleep(self.delay_s)
        return super().open(name)


def first_epoch(work: Path, count: int, batch: int, compute_s: float, workers: int,
                prefetch: bool, prefilled: bool = False) -> tuple[list[float], float, int]:
    """Each step's wait for its batch, the mean step time (wait + compute), in seconds, and
    how many files the main process found already local when it asked (num_workers=0)."""
    cache = work / f"cache-{workers}-{prefetch}"
    volume = CachedVolume(SlowSource(work / "src"), cache, read=read_all, prefetch_threads=8)
    if prefilled:  # the floor: every file already local, nothing left to wait for
        volume.prefetch(range(count))
        volume.wait()
    sampler = ElasticSampler(count, batch, seed=1, rank=0, world_size=1)
    loader = ElasticLoader(volume, sampler, num_workers=workers, collate_fn=list,
                           prefetch_batches=None if prefetch else 0)
    waits: list[float] = []
    start = time.perf_counter()
    it = iter(loader)
    while True:
        asked = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            break
        waits.append(time.perf_counter() - asked)
        time.sleep(compute_s)  # the training step
    elapsed = time.perf_counter() - start
    volume.close()
    shutil.rmtree(cache)
    return waits, elapsed / len(waits), volume.stats["hits"]


def slow_source(work: Path, count: int, size: int, batch: int, compute_s: float) -> None:
    make_files(work / "src", count, size)
    print(f"first epoch over slow storage: {count} files x {size // 1024} KiB, +20 ms per "
          f"file open, batch {batch}, compute {compute_s * 1000:.0f} ms per step; wait = time "
          "in next(loader), as a share of step time (all steps | without the first)")
    for workers in (0, 2):
        means = {}
        for label, prefetch, prefilled in (("prefetch off", False, False),
                                           ("prefetch on ", True, False),
                                           ("cache full  ", True, True)):
            waits, step, hits = first_epoch(work, count, batch, compute_s, workers, prefetch,
                                            prefilled)
            mean, steady = statistics.mean(waits), statistics.mean(waits[1:])
            means[label] = mean
            print(f"  num_workers={workers} {label}: wait {mean * 1000:5.1f} ms = "
                  f"{mean / step:6.1%} | {steady * 1000:5.1f} ms = {steady / step:6.1%} of step "
                  f"time {step * 1000:.0f} ms; first step waits {waits[0] * 1000:.0f} ms"
                  + (f"; {hits}/{count} files local when asked" if workers == 0 else ""))
        print(f"  num_workers={workers}: wait with prefetch / without = "
              f"{means['prefetch on '] / means['prefetch off']:.3f}; with prefetch / with the "
              f"cache already full (the floor: reading local files) = "
              f"{means['prefetch on '] / means['cache full  ']:.2f}  (goal: < 5% of step time)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=256)
    parser.add_argument("--file-kib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--slow-files", type=int, default=240)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        second_epoch(work / "epoch2", args.files, args.file_kib * 1024, args.rounds)
        slow_source(work / "slow", args.slow_files, 256 * 1024, args.batch, 0.050)


if __name__ == "__main__":
    main()
