"""Which Storage serves a checkpoint URL: a path or file:// URL is local, s3:// is S3Storage,
any other fsspec URL FsspecStorage (an S3 client is made lazily)."""

from __future__ import annotations

import os
from typing import Any

from perdure import storageurl
from perdure.runtime.checkpoint.storage import ENV_DIR, FsspecStorage, LocalStorage, Storage


def make_storage(url: str | os.PathLike[str] | None, **storage_options: Any) -> Storage:
    """Storage for ``url`` (None: $PERDURE_CHECKPOINT_DIR, set from the spec's checkpoint.dir)."""
    where = "Checkpointer url" if url is not None else ENV_DIR
    if url is None:
        url = os.environ.get(ENV_DIR)
        if not url:
            raise ValueError(
                "Checkpointer url is None and PERDURE_CHECKPOINT_DIR is not set; pass a local "
                "path or an fsspec URL (e.g. Checkpointer('./checkpoints'))."
            )
    text = os.fspath(url)
    why = storageurl.problem(text, schemes=None)
    if why:  # never quoted: it may hold a password (the URL may come from the environment)
        raise ValueError(f"{where}: the checkpoint URL {why}")
    if text.startswith("file://") and "::" not in text:
        return LocalStorage(text[len("file://") :])
    if "://" not in text and "::" not in text:
        return LocalStorage(text)
    if text.startswith("s3://"):  # imported when used: S3's client is not every job's
        from perdure.runtime.checkpoint.s3storage import S3Storage

        return S3Storage(text, **storage_options)
    return FsspecStorage(text, **storage_options)
