"""Checkpoints at ``s3://bucket/prefix``: the Storage interface over perdure's S3 client
(retries, verified uploads, parallel parts and ranged reads).

Object stores cannot rename: saves are written in place and the commit marker alone decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from perdure.runtime.checkpoint.storage import Storage
from perdure.runtime.s3.client import S3Client
from perdure.runtime.s3.ranged import RangedStream


class S3Storage(Storage):
    """A directory of checkpoints under an ``s3://bucket/prefix`` URL."""

    atomic_rename = False

    def __init__(self, url: str, **storage_options: Any) -> None:
        self.url = url
        self.root = url.removeprefix("s3://").strip("/")
        if not self.root:
            raise ValueError(f"checkpoint URL {url!r} names no bucket: use s3://bucket/prefix")
        self.client = S3Client(**storage_options)

    def list_names(self) -> list[str]:
        return self.client.list_names(self.root)

    def write_bytes(self, rel: str, data: bytes) -> None:
        self.client.put_bytes(self._p(rel), data)

    def read_bytes(self, rel: str) -> bytes:
        return self.client.cat(self._p(rel))

    def put_file(self, local: Path, rel: str) -> None:
        self.client.put_file(local, self._p(rel))

    def size(self, rel: str) -> int | None:
        found = self.client.head(self._p(rel))
        return None if found is None else found[0]

    def close(self) -> None:
        self.client.close()

    def sizes(self, rel: str) -> dict[str, int]:
        return self.client.sizes(self._p(rel))

    def rename(self, src: str, dst: str) -> None:
        self.client.move(self._p(src), self._p(dst))

    def remove_tree(self, rel: str) -> None:
        self.client.remove(self._p(rel))

    def open_read(self, rel: str) -> IO[bytes]:
        found = self.client.head(self._p(rel))
        if found is None:
            raise FileNotFoundError(f"{self.url}/{rel} does not exist")
        return RangedStream(self.client, self._p(rel), found[0])  # type: ignore[return-value]
