"""A CachedVolume over s3://bucket/prefix on a real S3 server (behind a fault proxy): shards
fetched ahead of use, evicted least recently used under the free-space threshold, and a resumed
run on a cold cache reads exactly the samples an uninterrupted run reads, despite 503s and
dropped connections on the way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.helpers.s3server import S3

from perdure.runtime import CachedVolume, ElasticSampler
from perdure.runtime.data import ElasticLoader
from perdure.runtime.s3.client import S3Client

SHARDS = 16
SIZE = 256 << 10


def _upload(s3: S3) -> None:
    client = S3Client()
    for i in range(SHARDS):
        client.put_bytes(f"{s3.bucket}/data/train/{i:03d}.bin", bytes([i]) * SIZE)


def _loader(volume: CachedVolume) -> ElasticLoader:
    sampler = ElasticSampler(SHARDS, 2, seed=7, rank=0, world_size=1)
    return ElasticLoader(volume, sampler, prefetch_batches=2, collate_fn=list)


def _read(path: str) -> tuple[int, int]:
    data = Path(path).read_bytes()
    assert data == data[:1] * len(data)  # never a file cut short or mixed
    return data[0], len(data)


def _volume(s3: S3, cache: Path, keep_files: int) -> CachedVolume:
    probe = CachedVolume(s3.url("data"), cache, read=_read)
    # Room for about `keep_files` shards above the threshold: the rest must be evicted.
    min_free = probe.free_bytes() - keep_files * SIZE - (64 << 10)
    return CachedVolume(s3.url("data"), cache, read=_read, min_free_bytes=min_free)


def _epoch(loader: ElasticLoader, stop: int | None = None) -> list[Any]:
    got: list[Any] = []
    for batch in loader:
        got.append(batch)
        if stop is not None and len(got) == stop:
            break
    return got


def test_s3_volume_prefetches_evicts_and_resumes_exactly_on_a_cold_cache(
    s3: S3, tmp_path: Path,
) -> None:
    _upload(s3)
    whole_volume = _volume(s3, tmp_path / "whole", keep_files=6)
    assert whole_volume.files == [f"train/{i:03d}.bin" for i in range(SHARDS)]
    whole = _epoch(_loader(whole_volume))
    assert sorted(x for b in whole for x, _ in b) == list(range(SHARDS))
    assert whole_volume.stats["evictions"] >= SHARDS // 4  # LRU under the threshold
    assert any(m == "GET" for m, _, _ in s3.proxy.seen)

    s3.proxy.fail("503", times=3, method="GET", path="/train/")
    s3.proxy.fail("drop", times=2, method="GET", path="/train/")
    s3.proxy.fail("cut", times=1, method="GET", path="/train/")
    first = _loader(_volume(s3, tmp_path / "first", keep_files=6))
    head = _epoch(first, stop=3)
    state = first.state_dict()
    cold = _loader(_volume(s3, tmp_path / "cold", keep_files=6))  # another host: empty cache
    cold.load_state_dict(state)
    assert head + _epoch(cold) == whole
    assert sorted(s3.proxy.faults()) == ["503", "503", "503", "cut", "drop", "drop"]


def test_a_missing_bucket_is_a_clear_error(s3: S3, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        CachedVolume(f"s3://{s3.bucket}-absent/data", tmp_path / "cache")
