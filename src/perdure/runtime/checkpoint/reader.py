"""Restore-side DCP plumbing that never unpickles and never trusts: metadata comes from JSON,
plain values load with ``weights_only=True``, and every item is checked against its checksum.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.futures import Future

from perdure.runtime.checkpoint import checksum, fastread, values
from perdure.runtime.checkpoint.errors import CheckpointCorruptError, CheckpointError
from perdure.runtime.checkpoint.metadata import Checksums
from perdure.runtime.checkpoint.storage import Storage
from perdure.runtime.compat import narrow

_READERS = 4  # files read at once by one rank


class SafeReader(FileSystemReader):
    """Reads one checkpoint directory (its metadata given, never unpickled), its files in
    parallel; corrupt bytes raise CheckpointCorruptError naming the file, the key and both
    checksums."""

    def __init__(
        self, storage: Storage, name: str, metadata: Metadata, checksums: Checksums | None
    ) -> None:
        super().__init__(name)
        self._storage = storage
        self._metadata = metadata
        self._name = name
        self._checksums = checksums

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        self._metadata.storage_meta = StorageMeta(load_id=self.load_id)
        return self._metadata

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Read every item of ``plan`` into its destination, one thread per file."""
        by_file: dict[str, list[ReadItem]] = {}
        for item in plan.items:
            by_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        files = list(by_file.items())
        if len(files) <= 1:
            for file, items in files:
                self._read_file(file, items, planner)
        else:  # this thread reads the first file: one thread fewer to start
            with ThreadPoolExecutor(min(len(files) - 1, _READERS), "perdure-restore") as pool:
                jobs = [pool.submit(self._read_file, f, i, planner) for f, i in files[1:]]
                self._read_file(*files[0], planner)
                for job in jobs:
                    job.result()
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def _read_file(self, file: str, items: list[ReadItem], planner: LoadPlanner) -> None:
        items.sort(key=lambda i: self.storage_data[i.storage_index].offset)
        with self._storage.open_read(f"{self._name}/{file}") as stream:
            plan = getattr(stream, "plan", None)  # a remote stream reads exactly these ahead
            if plan is not None:
                plan([(self.storage_data[i.storage_index].offset,
                       self.storage_data[i.storage_index].length) for i in items])
            for item in items:
                if not self._read_direct(stream, item, planner):
                    self._read_whole(stream, item, planner)

    def _read_direct(self, stream: Any, item: ReadItem, planner: LoadPlanner) -> bool:
        # Only a whole item, with its checksum: it is verified by reading all of it.
        if item.type == LoadItemType.BYTE_IO or (expected := self._expected(item)) is None:
            return False
        entry = self._metadata.state_dict_metadata[item.storage_index.fqn]
        assert isinstance(entry, TensorStorageMetadata)
        chunk = next((c for c in entry.chunks if c.offsets == item.storage_index.offset), None)
        target = planner.resolve_tensor(item).detach()
        if (chunk is None or target.dtype != entry.properties.dtype
                or any(item.storage_offsets) or tuple(item.lengths) != tuple(chunk.sizes)):
            return False
        info = self.storage_data[item.storage_index]
        span = fastread.payload_span(stream, info.offset, info.length)
        found = None if span is None else fastread.read_checked(
            stream, info.offset, info.length, span, target, expected[0])
        if found is None:
            return False
        self._check(item, expected, found)
        planner.commit_tensor(item, target)
        return True

    def _read_whole(self, stream: Any, item: ReadItem, planner: LoadPlanner) -> None:
        """DCP's own way: read the item's bytes, verify them, torch.load them safely."""
        info = self.storage_data[item.storage_index]
        stream.seek(info.offset)
        data = stream.read(info.length)
        if len(data) != info.length:
            raise CheckpointCorruptError(
                f"{self._where(item)} is cut short: {len(data)} of {info.length} bytes")
        expected = self._expected(item)
        if expected is not None:
            self._check(item, expected, checksum.update(expected[0], 0, data))
        try:
            if item.type == LoadItemType.BYTE_IO:
                planner.load_bytes(item, io.BytesIO(data))
                return
            tensor = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            tensor = narrow(tensor, item.storage_offsets, item.lengths)
            target = planner.resolve_tensor(item).detach()
            if target.size() != tensor.size():
                raise ValueError(f"it holds shape {tuple(tensor.size())}, the metadata says "
                                 f"{tuple(target.size())}")
            target.copy_(tensor)
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointCorruptError(
                f"{self._where(item)} cannot be read: {describe(exc)}") from None
        planner.commit_tensor(item, target)

    def _expected(self, item: ReadItem) -> tuple[str, int] | None:
        if self._checksums is None:
            return None
        crc = self._checksums[1].get(item.storage_index)
        if crc is None:
            raise CheckpointCorruptError(f"{self._where(item)} has no recorded checksum")
        return self._checksums[0], crc

    def _check(self, item: ReadItem, expected: tuple[str, int], found: int) -> None:
        if found != expected[1]:
            raise CheckpointCorruptError(
                f"{self._where(item)} is corrupt: its {expected[0]} is {checksum.text(found)}, "
                f"the commit recorded {checksum.text(expected[1])}")

    def _where(self, item: ReadItem) -> str:
        info = self.storage_data[item.storage_index]
        return (f"{self._name}/{info.relative_path} (bytes {info.offset}..."
                f"{info.offset + info.length} of {item.storage_index.fqn!r})")


def describe(exc: BaseException) -> str:
    """An exception's type and first line, without torch.load's advice to load unsafely."""
    lines = str(exc).strip().splitlines() or [""]
    first = lines[0]
    if "weights_only" in str(exc) or "Weights only load failed" in first:
        first = "the safe loader refused its content (it is not tensors and plain values)"
    return f"{type(exc).__name__}: {first}"


class SafeLoadPlanner(DefaultLoadPlanner):
    """Loads into a flat dict of target tensors; plain values are collected, never executed."""

    def __init__(self) -> None:
        super().__init__(flatten_state_dict=False, allow_partial_load=False)
        self.loaded: dict[str, Any] = {}

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        self.loaded[read_item.dest_index.fqn] = values.decode(
            torch.load(value, map_location="cpu", weights_only=True)
        )
