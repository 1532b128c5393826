"""Restore-side DCP plumbing that never unpickles: metadata comes from JSON, plain values are
loaded with ``weights_only=True``, files are read through the checkpoint's Storage, and
tensors are read straight into their destination where the layout allows (fastread).

Side effects: reads files.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

import torch
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemBase, FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.futures import Future

from perdure.runtime.checkpoint import fastread, values
from perdure.runtime.checkpoint.storage import Storage


class _StorageFS(FileSystemBase):
    """DCP's file-system interface over a Storage, for reading only."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @staticmethod
    def _read_only(what: str) -> ValueError:
        return ValueError(f"the restore reader only reads checkpoints; asked to {what}")

    @contextmanager
    def create_stream(self, path: Any, mode: str) -> Generator[io.IOBase, None, None]:
        if "r" not in mode:
            raise self._read_only(f"open {path} with mode {mode!r}")
        with self.storage.open_read(str(path)) as stream:
            yield stream  # type: ignore[misc]

    def concat_path(self, path: Any, suffix: str) -> str:
        return f"{path}/{suffix}"

    def rename(self, path: Any, new_path: Any) -> None:
        raise self._read_only(f"rename {path} to {new_path}")

    def init_path(self, path: Any) -> str:
        return str(path)

    def mkdir(self, path: Any) -> None:
        raise self._read_only(f"create the directory {path}")

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        return True

    def exists(self, path: Any) -> bool:
        return self.storage.size(str(path)) is not None

    def rm_file(self, path: Any) -> None:
        raise self._read_only(f"delete {path}")


class SafeReader(FileSystemReader):
    """Reads one checkpoint directory; its metadata is given (from the JSON), never unpickled."""

    def __init__(self, storage: Storage, name: str, metadata: Metadata) -> None:
        local = storage.local_path(name)
        super().__init__(local if local is not None else name)
        # DCP types this attribute as its FileSystem; any FileSystemBase works for reads.
        self.fs = FileSystem() if local is not None else _StorageFS(storage)  # type: ignore[assignment]
        self._metadata = metadata

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        self._metadata.storage_meta = StorageMeta(load_id=self.load_id)
        return self._metadata

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Read what can go straight into its destination; leave the rest to DCP."""
        by_file: dict[str, list[ReadItem]] = {}
        for item in plan.items:
            by_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        rest: list[ReadItem] = []
        for file, items in by_file.items():
            items.sort(key=lambda i: self.storage_data[i.storage_index].offset)
            with self.fs.create_stream(self.fs.concat_path(self.path, file), "rb") as stream:
                rest += [i for i in items if not self._read_direct(stream, i, planner)]
        return super().read_data(dataclasses.replace(plan, items=rest), planner)

    def _read_direct(self, stream: Any, item: ReadItem, planner: LoadPlanner) -> bool:
        if item.type == LoadItemType.BYTE_IO:
            return False
        entry = self._metadata.state_dict_metadata[item.storage_index.fqn]
        assert isinstance(entry, TensorStorageMetadata)
        chunk = next((c for c in entry.chunks if c.offsets == item.storage_index.offset), None)
        target = planner.resolve_tensor(item).detach()
        if chunk is None or target.dtype != entry.properties.dtype:
            return False
        info = self.storage_data[item.storage_index]
        span = fastread.payload_span(stream, info.offset, info.length)
        box = fastread.row_span(chunk.sizes, item.storage_offsets, item.lengths,
                                target.element_size())
        if span is None or box is None or box[1] != target.numel() * target.element_size():
            return False
        if not fastread.read_into(stream, info.offset + span[0] + box[0], target):
            return False
        planner.commit_tensor(item, target)
        return True


class SafeLoadPlanner(DefaultLoadPlanner):
    """Loads into a flat dict of target tensors; plain values are collected, never executed."""

    def __init__(self) -> None:
        super().__init__(flatten_state_dict=False, allow_partial_load=False)
        self.loaded: dict[str, Any] = {}

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        self.loaded[read_item.dest_index.fqn] = values.decode(
            torch.load(value, map_location="cpu", weights_only=True)
        )
