"""Page-cache eviction for the benchmarks' cold-read baselines (Linux)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def drop_cache(paths: Iterable[str | Path]) -> None:
    """Evict files from the page cache so the next read comes from the disk."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
