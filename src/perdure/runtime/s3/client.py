"""The S3 calls perdure makes, over s3fs: each retried (retry.py), each upload checked against
the ETag the server reports (the MD5 of what it stored), reads and large uploads in parallel
parts of PERDURE_S3_PART_MB (default 16), PERDURE_S3_CONCURRENCY at a time (default 8).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from perdure.runtime.s3 import retry
from perdure.runtime.s3.retry import RetryPolicy, positive_int

log = logging.getLogger("perdure.s3")
_T = TypeVar("_T")
MIN_PART = 5 << 20  # S3's smallest part (but the last)
INSTALL_HINT = "install it with: pip install 'perdure[s3]'"


class VerifyError(OSError):
    """An upload that the server does not hold as sent (size or content differ)."""


def s3_filesystem(**options: Any) -> Any:
    """An s3fs filesystem whose own retries are off (``retry.call`` retries, visibly)."""
    try:
        import s3fs
    except ImportError:
        raise ImportError(f"s3:// URLs need the s3fs package; {INSTALL_HINT}") from None
    config = dict(options.pop("config_kwargs", None) or {})
    config.setdefault("retries", {"total_max_attempts": 1})
    # Not fsspec's shared instance: its endpoint and credentials were read when it was made.
    options.setdefault("skip_instance_cache", True)
    fs = s3fs.S3FileSystem(config_kwargs=config, **options)
    fs.retries = 1
    return fs


class S3Client:
    """Object operations under one s3fs filesystem; paths are 'bucket/key'."""

    def __init__(self, policy: RetryPolicy | None = None, **options: Any) -> None:
        self.fs = s3_filesystem(**options)
        self.policy = policy or RetryPolicy.from_env()
        self.part_bytes = max(MIN_PART, positive_int("PERDURE_S3_PART_MB", 16) << 20)
        self.concurrency = positive_int("PERDURE_S3_CONCURRENCY", 8)
        self._pools: dict[str, ThreadPoolExecutor] = {}

    def _executor(self, name: str) -> ThreadPoolExecutor:
        """The "parts" pool or the "ahead" one (reads ahead wait on parts: never one pool)."""
        pool = self._pools.get(name)
        if pool is None:
            size = self.concurrency * 2 if name == "parts" else self.concurrency
            pool = self._pools[name] = ThreadPoolExecutor(size, f"perdure-s3-{name}")
        return pool

    def close(self) -> None:
        """Stop the threads (a later call starts them again)."""
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.shutdown(wait=True, cancel_futures=True)

    def _call(self, what: str, fn: Callable[[], _T]) -> _T:
        return retry.call(what, fn, self.policy)

    def _s3(self, what: str, method: str, **kwargs: Any) -> Any:
        return self._call(f"{method} {what}", lambda: self.fs.call_s3(method, **kwargs))

    @staticmethod
    def split(path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    def submit(self, fn: Callable[..., _T], *args: Any) -> Future[_T]:
        """Run ``fn(*args)`` in the background (a read ahead)."""
        return self._executor("ahead").submit(fn, *args)

    def head(self, path: str) -> tuple[int, str] | None:
        """(size, ETag) of ``path``, or None when there is no such object."""
        bucket, key = self.split(path)
        try:
            info = self._s3(path, "head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None
        return int(info["ContentLength"]), str(info.get("ETag", "")).strip('"')

    def cat(self, path: str) -> bytes:
        data: bytes = self._call(f"get {path}", lambda: self.fs.cat_file(path))
        return data

    def read_into(self, path: str, start: int, view: memoryview) -> None:
        """Fill ``view`` with the bytes of ``path`` from ``start``, by parallel ranged GETs."""
        spans = _spans(start, len(view), self.part_bytes)
        if len(spans) == 1:
            self._get(path, start, view)
            return
        pool = self._executor("parts")
        jobs = [pool.submit(self._get, path, s, view[s - start : s - start + n])
                for s, n in spans]
        for job in jobs:
            job.result()

    def _get(self, path: str, start: int, view: memoryview) -> None:
        end = start + len(view)
        data = self._call(f"get {path} bytes {start}-{end}",
                          lambda: self.fs.cat_file(path, start=start, end=end))
        if len(data) != len(view):
            raise EOFError(f"{path}: asked for bytes {start}-{end}, got {len(data)}")
        view[:] = data

    def _ls(self, path: str, detail: bool) -> list[Any]:
        try:
            found: list[Any] = self._call(
                f"list {path}", lambda: self.fs.ls(path, detail=detail, refresh=True))
        except FileNotFoundError:
            return []
        return found

    def list_names(self, path: str) -> list[str]:
        """Names of the immediate children of ``path`` ([] when there are none)."""
        return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in self._ls(path, False))

    def sizes(self, path: str) -> dict[str, int]:
        """Name -> size of the objects directly under ``path`` (one listing)."""
        return {str(e["name"]).rstrip("/").rsplit("/", 1)[-1]: int(e.get("size") or 0)
                for e in self._ls(path, True) if e.get("type") == "file"}

    def find(self, path: str) -> list[str]:
        """Every object below ``path`` (full paths)."""
        found: list[str] = self._call(f"list {path}", lambda: self.fs.find(path, withdirs=False))
        return found

    def put_bytes(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` and confirm the server holds exactly it."""
        bucket, key = self.split(path)
        out = self._s3(path, "put_object", Bucket=bucket, Key=key, Body=data)
        self.fs.invalidate_cache(path)  # s3fs's listings of the prefix are stale now
        _check_tag(path, out.get("ETag"), hashlib.md5(data, usedforsecurity=False).hexdigest())

    def put_file(self, local: Path, path: str) -> None:
        """Upload ``local`` to ``path`` (in parallel parts when large) and confirm it."""
        size = local.stat().st_size
        if size <= self.part_bytes:
            self.put_bytes(path, local.read_bytes())
            return
        self._multipart(local, path, size)
        self.fs.invalidate_cache(path)

    def _multipart(self, local: Path, path: str, size: int) -> str:
        bucket, key = self.split(path)
        upload = self._s3(path, "create_multipart_upload", Bucket=bucket, Key=key)["UploadId"]
        spans = _spans(0, size, self.part_bytes)
        try:
            with open(local, "rb", buffering=0) as f:
                fd = f.fileno()
                digests = list(self._executor("parts").map(
                    lambda n: self._part(fd, path, upload, n + 1, *spans[n]), range(len(spans))))
            parts = [{"PartNumber": n + 1, "ETag": etag} for n, (etag, _) in enumerate(digests)]
            whole = hashlib.md5(b"".join(d for _, d in digests), usedforsecurity=False)
            expected = f"{whole.hexdigest()}-{len(digests)}"
            try:
                out = self._s3(path, "complete_multipart_upload", Bucket=bucket, Key=key,
                               UploadId=upload, MultipartUpload={"Parts": parts})
            except Exception:
                # A retry after a lost answer finds the upload already completed (NoSuchUpload):
                # what the server holds decides.
                self._confirm(path, size, expected)
                return expected
            _check_tag(path, out.get("ETag"), expected)
            return expected
        except BaseException:
            try:
                self.fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key,
                                UploadId=upload)
            except Exception as exc:  # the bucket's lifecycle rules clean up what is left
                log.warning("could not abort the upload of %s: %s", path, retry.describe(exc))
            raise

    def _part(self, fd: int, path: str, upload: str, number: int, start: int,
              length: int) -> tuple[str, bytes]:
        data = os.pread(fd, length, start)
        if len(data) != length:
            raise EOFError(f"{path}: the staged file ended before byte {start + length}")
        digest = hashlib.md5(data, usedforsecurity=False).digest()
        bucket, key = self.split(path)
        out = self._s3(f"{path} part {number}", "upload_part", Bucket=bucket, Key=key,
                       UploadId=upload, PartNumber=number, Body=data)
        return str(out["ETag"]), digest

    def _confirm(self, path: str, size: int, etag: str) -> None:
        found = self.head(path)
        if found is None:
            raise VerifyError(f"{path} is not on the server after its upload returned")
        if found[0] != size:
            raise VerifyError(f"{path} holds {found[0]} bytes on the server; {size} were sent")
        if found[1] and found[1] != etag:
            raise VerifyError(f"{path} holds other bytes than were sent (ETag {found[1]}, "
                              f"expected {etag})")

    def move(self, src: str, dst: str) -> None:
        """Move every object below ``src`` to the same place below ``dst``: server-side copies,
        then the deletes (not atomic: an interrupted move leaves objects in both)."""
        for name in self.find(src):
            self._call(f"copy {name}", partial(self.fs.copy, name, dst + name[len(src):]))
        self.fs.invalidate_cache(dst)
        self.remove(src)

    def remove(self, path: str) -> None:
        """Delete ``path`` and everything below it; a missing path is not an error."""
        with contextlib.suppress(FileNotFoundError):
            self._call(f"delete {path}", lambda: self.fs.rm(path, recursive=True))
        self.fs.invalidate_cache(path)


def _check_tag(path: str, found: object, expected: str) -> None:
    """Raise VerifyError when the server's ETag (if it sent one) is not `expected`."""
    tag = str(found or "").strip('"')
    if tag and tag != expected:
        raise VerifyError(f"{path} holds other bytes than were sent (ETag {tag}, expected "
                          f"{expected})")


def _spans(start: int, length: int, part: int) -> list[tuple[int, int]]:
    """(offset, size) of ``part``-byte parts of [start, start + length), the last the rest."""
    count = max(1, length // part)
    spans = [(start + i * part, part) for i in range(count)]
    last_start, _ = spans[-1]
    spans[-1] = (last_start, start + length - last_start)
    return spans
