"""Where a CachedVolume's files come from: a local (or mounted) directory, S3 or fsspec; the
`Source` protocol for anything else. Files are named by relative POSIX paths.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO, Protocol, runtime_checkable

from perdure import storageurl

__all__ = ["FsspecSource", "LocalSource", "S3Source", "Source", "as_source", "check_name"]


@runtime_checkable
class Source(Protocol):
    """A read-only tree of files on (slow) storage."""

    def describe(self) -> str:
        """A stable identity (URL or absolute path); caches of different sources never mix."""
        ...

    def list_files(self) -> list[str]:
        """Every file's relative POSIX path, sorted."""
        ...

    def open(self, name: str) -> tuple[BinaryIO, int]:
        """Open `name` for reading; return the stream and its size in bytes."""
        ...


def check_name(name: str) -> str:
    """Reject names that would escape the cache directory ('..', absolute paths)."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(
            f"file name {name!r} must be a relative POSIX path inside the source, without "
            "'.', '..' or empty parts"
        )
    return name


class LocalSource:
    """Files under a local or mounted directory (NFS, a FUSE bucket mount, ...)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.abspath(os.fspath(root))
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"source directory {self.root} does not exist")

    def describe(self) -> str:
        return "file://" + self.root

    def list_files(self) -> list[str]:
        return sorted(os.path.relpath(os.path.join(folder, file), self.root).replace(os.sep, "/")
                      for folder, _dirs, files in os.walk(self.root) for file in files)

    def open(self, name: str) -> tuple[BinaryIO, int]:
        stream = open(os.path.join(self.root, check_name(name)), "rb")  # noqa: SIM115
        return stream, os.fstat(stream.fileno()).st_size


class FsspecSource:
    """Files under an fsspec URL (s3://bucket/prefix, gs://..., memory://...)."""

    def __init__(self, url: str, **storage_options: object) -> None:
        import fsspec

        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **storage_options)
        self.root = self.root.rstrip("/")

    def describe(self) -> str:
        return self.url

    def list_files(self) -> list[str]:
        prefix = self.root + "/"
        found = self.fs.find(self.root)
        return sorted(p[len(prefix) :] if p.startswith(prefix) else p for p in found)

    def open(self, name: str) -> tuple[BinaryIO, int]:
        path = f"{self.root}/{check_name(name)}"
        stream = self.fs.open(path, "rb")
        size = getattr(stream, "size", None)
        return stream, int(size if size is not None else self.fs.size(path))


class S3Source:
    """Files under ``s3://bucket/prefix``, through perdure's S3 client: every call retried on
    the store's transient errors (503 SlowDown, dropped connections), large files read with
    parallel ranged GETs. Credentials and endpoint come from the AWS chain."""

    def __init__(self, url: str, **storage_options: Any) -> None:
        self.url = url.rstrip("/")
        self.root = self.url.removeprefix("s3://")
        if not self.root:
            raise ValueError(f"source URL {url!r} names no bucket: use s3://bucket/prefix")
        self._options = storage_options
        self._client: Any = None
        self._pid = 0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_pid": 0}  # a worker makes its own

    def _s3(self) -> Any:
        if self._client is None or self._pid != os.getpid():  # threads do not survive fork
            from perdure.runtime.s3.client import S3Client

            self._client, self._pid = S3Client(**self._options), os.getpid()
        return self._client

    def describe(self) -> str:
        return self.url

    def list_files(self) -> list[str]:
        prefix = self.root + "/"
        return sorted(p[len(prefix):] for p in self._s3().find(self.root)
                      if p.startswith(prefix))

    def open(self, name: str) -> tuple[BinaryIO, int]:
        from perdure.runtime.s3.ranged import RangedStream

        path = f"{self.root}/{check_name(name)}"
        found = self._s3().head(path)
        if found is None:
            raise FileNotFoundError(f"{self.url}/{name} does not exist")
        return RangedStream(self._s3(), path, found[0]), found[0]  # type: ignore[return-value]


def as_source(source: str | os.PathLike[str] | Source) -> Source:
    """A Source for a directory path, an fsspec URL ("scheme://...") or a Source itself."""
    if isinstance(source, Source):
        return source
    text = os.fspath(source)
    why = storageurl.problem(text, schemes=None)
    if why:  # never quoted: it may hold a password
        raise ValueError(f"the data source URL {why}")
    if text.startswith("s3://"):
        return S3Source(text)
    if "://" in text and not text.startswith("file://"):
        return FsspecSource(text)
    return LocalSource(text.removeprefix("file://"))
