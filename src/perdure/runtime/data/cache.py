"""CachedVolume: read files from slow storage through a local cache shared by all processes.

One cache directory may serve every DataLoader worker and rank of a host: a copy is renamed
into place when complete, and a per-file flock makes one process copy while the others wait.

Eviction: before each copy, the least recently used files (oldest mtime: every use touches
the file) go until free space stays above the threshold (`min_free_bytes`, else
$PERDURE_CACHE_MIN_FREE_BYTES, else 10% of the filesystem); when other data holds the
filesystem under it, only room for the copy is made, so the cache never empties itself under
its readers. A copy that ends short of the source's size is an error, never a cached file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from torch.utils.data import Dataset

from perdure.runtime.data.cache_io import file_lock, reset_after_fork
from perdure.runtime.data.sources import Source, as_source, check_name

__all__ = ["ENV_MIN_FREE_BYTES", "CachedFile", "CachedVolume", "plan_eviction"]

ENV_MIN_FREE_BYTES = "PERDURE_CACHE_MIN_FREE_BYTES"
DEFAULT_MIN_FREE_FRACTION = 0.10
_META = ".perdure"  # lock and temp files live here, never evicted
_STRIPES = 1024
_STALE_TEMP_S = 3600.0
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedFile:
    """A file in the cache as eviction sees it."""

    path: str
    size: int  # bytes it occupies on disk
    last_used_ns: int


def plan_eviction(
    files: Sequence[CachedFile], free: int, need: int, min_free: int
) -> list[CachedFile]:
    """Which files to delete, oldest use first, so `need` bytes fit above `min_free`."""
    victims: list[CachedFile] = []
    for cached in sorted(files, key=lambda f: f.last_used_ns):
        if free - need >= min_free:
            break
        victims.append(cached)
        free += cached.size
    return victims


def _env_min_free() -> int | None:
    raw = os.environ.get(ENV_MIN_FREE_BYTES)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(
            f"{ENV_MIN_FREE_BYTES}={raw!r} is not an integer; set it to a number of bytes"
        ) from None
    if value < 0:
        raise ValueError(f"{ENV_MIN_FREE_BYTES}={value} must be >= 0 bytes")
    return value


class CachedVolume(Dataset[Any]):
    """A dataset of the files under `source`, each read through a local cache.

    `volume[i]` (or `volume.path(name)`) returns the local path of file i, copying it on first
    use; with `read=fn` it returns `fn(local_path)` instead, retrying if the file was evicted
    in between. `source` is a directory, an fsspec URL or a `Source`.
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | Source,
        cache_dir: str | os.PathLike[str],
        *,
        files: Sequence[str] | None = None,
        read: Callable[[str], Any] | None = None,
        prefetch_threads: int = 4,
        min_free_bytes: int | None = None,
    ) -> None:
        if prefetch_threads < 1:
            raise ValueError(f"prefetch_threads must be at least 1, got {prefetch_threads}")
        self.source = as_source(source)
        self.cache_dir = os.path.abspath(os.fspath(cache_dir))
        listed = self.source.list_files() if files is None else list(files)
        self.files = [check_name(f) for f in listed]
        self.read = read
        self.prefetch_threads = prefetch_threads
        env_min_free = _env_min_free()  # a bad value fails here, even when overridden
        self._min_free = env_min_free if min_free_bytes is None else min_free_bytes
        space = hashlib.sha256(self.source.describe().encode()).hexdigest()[:16]
        self._root = os.path.join(self.cache_dir, space)
        self._meta = os.path.join(self.cache_dir, _META)
        for folder in (self._root, *(os.path.join(self._meta, d) for d in ("tmp", "locks"))):
            os.makedirs(folder, exist_ok=True)
        self._init_runtime()

    def _init_runtime(self) -> None:
        """The per-process part: made anew in a forked or unpickled copy (DataLoader workers)."""
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[str, Future[str]] = {}
        self.stats = {"hits": 0, "copies": 0, "evictions": 0}
        self._warned = False
        reset_after_fork(self)

    def _count(self, what: str) -> None:
        with self._lock:
            self.stats[what] += 1

    def __getstate__(self) -> dict[str, Any]:
        runtime = ("_lock", "_pool", "_pending", "stats", "_warned")
        return {k: v for k, v in self.__dict__.items() if k not in runtime}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> Any:
        if self.read is None:
            return self.path(index)
        for _ in range(3):
            local = self.path(index)
            try:
                return self.read(local)
            except FileNotFoundError:
                if os.path.exists(local):
                    raise  # the reader's own missing file, not an eviction
        raise FileNotFoundError(f"{self.files[index]} was evicted three times while being read")

    def name_of(self, key: int | str) -> str:
        """The relative name of file `key` (an index into `files`, or a name)."""
        return key if isinstance(key, str) else self.files[key]

    def local_path(self, key: int | str) -> str:
        """Where file `key` lives in the cache (it may not be there yet)."""
        return os.path.join(self._root, *self.name_of(key).split("/"))

    def path(self, key: int | str) -> str:
        """The local path of file `key`, copying it from the source first if needed."""
        name = self.name_of(key)
        local = self.local_path(name)
        if _touch(local):
            self._count("hits")
            return local
        with self._lock:  # a copy in flight holds the file's lock: _fetch waits for it
            self._pending.pop(name, None)
        return self._fetch(name)

    def prefetch(self, keys: Iterable[int | str]) -> None:
        """Start copying files `keys` (indices or names) in the background; returns at once.

        A failed copy is retried when the file is used; `wait()` raises it otherwise.
        """
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.prefetch_threads, "perdure-cache")
            for key in keys:
                name = self.name_of(key)
                known = self._pending.get(name)
                if known is not None and not _failed(known):
                    continue
                if os.path.exists(self.local_path(name)):
                    continue
                self._pending[name] = self._pool.submit(self._fetch, name)

    def wait(self) -> None:
        """Wait for started prefetches; raise the first failure that no use has retried."""
        with self._lock:
            pending = dict(self._pending)
        futures.wait(pending.values())
        errors: list[BaseException] = []
        with self._lock:
            for name, future in pending.items():
                if self._pending.get(name) is future:
                    del self._pending[name]
                    error = future.exception()
                    if error is not None:
                        errors.append(error)
        if errors:
            raise RuntimeError(f"{len(errors)} prefetch copies failed") from errors[0]

    def close(self) -> None:
        """Stop the prefetch threads (waiting for copies in flight)."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._pending.clear()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _fetch(self, name: str) -> str:
        local = self.local_path(name)
        stripe = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest()) % _STRIPES
        with file_lock(os.path.join(self._meta, "locks", f"{stripe:04d}")):
            if _touch(local):  # another thread or process copied it while we waited
                self._count("hits")
                return local
            stream, size = self.source.open(name)
            with stream:
                self._make_room(size)
                temp = os.path.join(self._meta, "tmp", f"{uuid.uuid4().hex}.part")
                try:
                    with open(temp, "wb") as out:
                        shutil.copyfileobj(stream, out, 1 << 20)
                        copied = out.tell()
                    if copied != size:
                        raise OSError(
                            errno.EIO, f"{self.source.describe()}/{name}: copied {copied} of "
                            f"{size} bytes; the source ended early")
                    os.makedirs(os.path.dirname(local), exist_ok=True)
                    os.replace(temp, local)  # atomic: the name appears complete or not at all
                except BaseException:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(temp)
                    raise
        self._count("copies")
        return local

    def min_free_bytes(self) -> int:
        """The free-space threshold in force for the cache filesystem, in bytes."""
        if self._min_free is not None:
            return self._min_free
        fs = os.statvfs(self.cache_dir)
        return int(fs.f_blocks * fs.f_frsize * DEFAULT_MIN_FREE_FRACTION)

    def free_bytes(self) -> int:
        """Free space on the cache filesystem, in bytes."""
        fs = os.statvfs(self.cache_dir)
        return fs.f_bavail * fs.f_frsize

    def _make_room(self, need: int) -> None:
        min_free = self.min_free_bytes()
        if self.free_bytes() - need >= min_free:
            return
        with file_lock(os.path.join(self._meta, "evict.lock")):
            for _ in range(3):  # others may write to the filesystem meanwhile
                free = self.free_bytes()
                if free - need >= min_free:
                    return
                files = self._scan()
                # Other data holds the filesystem under the threshold: emptying the cache would
                # not lift it, only take the files being read. Make room for this copy only.
                reachable = free + sum(f.size for f in files) - need >= min_free
                victims = plan_eviction(files, free, need, min_free if reachable else free)
                for victim in victims:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(victim.path)
                        self._count("evictions")
                if not victims or not reachable:
                    break
        self._short_of_space(need, min_free)

    def _short_of_space(self, need: int, min_free: int) -> None:
        free = self.free_bytes()
        if free < need:
            raise OSError(
                errno.ENOSPC,
                f"cache filesystem of {self.cache_dir} has {free} bytes free, a {need}-byte "
                "file does not fit even with the cache emptied; free space or use another "
                "cache_dir",
            )
        if not self._warned:
            self._warned = True
            _log.warning(
                "cache %s: free space %d stays under the threshold %d bytes even with the "
                "cache emptied; the cache keeps to its size and copies anyway (set %s to "
                "change the threshold)",
                self.cache_dir, free, min_free, ENV_MIN_FREE_BYTES,
            )

    def _scan(self) -> list[CachedFile]:
        found: list[CachedFile] = []
        now = time.time()
        for folder, dirs, files in os.walk(self.cache_dir):
            if folder == self.cache_dir and _META in dirs:
                dirs.remove(_META)
            for file in files:
                path = os.path.join(folder, file)
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(path)
                    found.append(CachedFile(path, st.st_blocks * 512, st.st_mtime_ns))
        for entry in os.scandir(os.path.join(self._meta, "tmp")):
            with contextlib.suppress(FileNotFoundError):
                if now - entry.stat().st_mtime > _STALE_TEMP_S:
                    os.unlink(entry.path)  # left by a copier that was killed
        return found


def _failed(future: Future[str]) -> bool:
    return future.done() and not future.cancelled() and future.exception() is not None


def _touch(path: str) -> bool:
    """Mark `path` used now (the LRU clock); False if it is not in the cache."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True
