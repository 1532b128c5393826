"""Where checkpoints live: a local directory or any fsspec URL, behind one small interface.

``LocalStorage`` writes with fsync and publishes by renaming a directory (atomic on POSIX);
``S3Storage`` (s3storage.py) and ``FsspecStorage`` cannot rename atomically, so there the
commit marker alone decides whether a checkpoint is complete.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO, Any

from perdure.runtime.checkpoint import modes

ENV_DIR = "PERDURE_CHECKPOINT_DIR"


class Storage(ABC):
    """A directory of checkpoints; paths below are relative to its root, '/'-separated. The
    defaults are those of an object store (no directories, nothing local)."""

    url: str
    root: str
    atomic_rename: bool

    def _p(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    @abstractmethod
    def list_names(self) -> list[str]:
        """Names of the root's immediate children ([] when the root does not exist yet)."""

    def makedirs(self, rel: str) -> None:
        """Create directory ``rel`` and its parents."""
        return None

    @abstractmethod
    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write ``data`` to ``rel`` durably: it survives a crash once this returns."""

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes:
        """Read the whole of ``rel``."""

    @abstractmethod
    def put_file(self, local: Path, rel: str) -> None:
        """Copy a local file to ``rel`` durably (the upload of a tiered save)."""

    @abstractmethod
    def size(self, rel: str) -> int | None:
        """Size of file ``rel`` in bytes, or None when it does not exist."""

    def close(self) -> None:
        """Release threads and connections (the storage stays usable: they come back)."""
        return None

    def sizes(self, rel: str) -> dict[str, int] | None:
        """Sizes of the files in directory ``rel`` in one listing (None: ask ``size``)."""
        return None

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Rename directory ``src`` to ``dst``; atomic only where ``atomic_rename``, and there
        it fails when ``dst`` is taken, as POSIX's rename does (OSError: ENOTEMPTY or EEXIST
        for a directory with entries, ENOTDIR for a file)."""

    @abstractmethod
    def remove_tree(self, rel: str) -> None:
        """Delete ``rel`` and everything below it; a missing path is not an error."""

    def sync_dir(self, rel: str) -> None:
        """Make the entries of directory ``rel`` durable (an upload is once put returns)."""
        return None

    @abstractmethod
    def open_read(self, rel: str) -> IO[bytes]:
        """Open file ``rel`` for reading."""

    def local_path(self, rel: str) -> Path | None:
        """The local file system path of ``rel``, or None when storage is not local."""
        return None


class LocalStorage(Storage):
    """Checkpoints in a local (or NFS-mounted) directory."""

    atomic_rename = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = self.url = str(Path(root).expanduser().absolute())

    def list_names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []

    def makedirs(self, rel: str) -> None:
        modes.make_dirs(self._p(rel))

    def write_bytes(self, rel: str, data: bytes) -> None:
        with modes.create(self._p(rel)) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def read_bytes(self, rel: str) -> bytes:
        with open(self._p(rel), "rb") as f:
            return f.read()

    def put_file(self, local: Path, rel: str) -> None:
        dst = self._p(rel)
        with open(local, "rb") as src, modes.create(dst) as out:
            shutil.copyfileobj(src, out, 16 << 20)
            out.flush()
            os.fsync(out.fileno())

    def size(self, rel: str) -> int | None:
        try:
            return os.stat(self._p(rel)).st_size
        except FileNotFoundError:
            return None

    def rename(self, src: str, dst: str) -> None:
        os.rename(self._p(src), self._p(dst))

    def remove_tree(self, rel: str) -> None:
        shutil.rmtree(self._p(rel), ignore_errors=True)

    def sync_dir(self, rel: str) -> None:
        fd = os.open(self._p(rel), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def open_read(self, rel: str) -> IO[bytes]:
        return open(self._p(rel), "rb")

    def local_path(self, rel: str) -> Path:
        return Path(self._p(rel))


class FsspecStorage(Storage):
    """Checkpoints on any fsspec filesystem; the commit marker alone decides completeness."""

    atomic_rename = False

    def __init__(self, url: str, **storage_options: Any) -> None:
        from fsspec.core import url_to_fs

        self.url = url
        self.fs, root = url_to_fs(url, **storage_options)
        self.root = root.rstrip("/")

    def list_names(self) -> list[str]:
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def makedirs(self, rel: str) -> None:
        self.fs.makedirs(self._p(rel), exist_ok=True)

    def write_bytes(self, rel: str, data: bytes) -> None:
        self.fs.pipe_file(self._p(rel), data)

    def read_bytes(self, rel: str) -> bytes:
        data: bytes = self.fs.cat_file(self._p(rel))
        return data

    def put_file(self, local: Path, rel: str) -> None:
        self.fs.put_file(str(local), self._p(rel))

    def size(self, rel: str) -> int | None:
        try:
            return int(self.fs.size(self._p(rel)))
        except FileNotFoundError:
            return None

    def rename(self, src: str, dst: str) -> None:
        self.fs.mv(self._p(src), self._p(dst), recursive=True)

    def remove_tree(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._p(rel), recursive=True)

    def open_read(self, rel: str) -> IO[bytes]:
        stream: IO[bytes] = self.fs.open(self._p(rel), "rb")
        return stream
