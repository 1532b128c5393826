"""DCP metadata as JSON, so that a restore reads it without unpickling.

A *path* is how a flattened key maps back to the nested state: a tuple of ``("d", key)`` (a
dict key, with its original type) and ``("l", index)`` (a list position) steps.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.storage import WriteResult

from perdure.runtime import compat
from perdure.runtime.checkpoint import checksum
from perdure.runtime.checkpoint.shared import dtype_from_name, dtype_name

PathStep = tuple[str, Any]
Path = tuple[PathStep, ...]


Checksums = tuple[str, dict[MetadataIndex, int]]
"""The algorithm and each stored item's checksum (of its bytes in the shard file)."""


def encode_metadata(
    md: Metadata, paths: dict[str, Path], checksums: Checksums | None = None
) -> dict[str, Any]:
    """JSON-ready form of the layout, storage locations, key paths and item checksums."""
    entries: dict[str, Any] = {}
    for fqn, item in md.state_dict_metadata.items():
        if isinstance(item, TensorStorageMetadata):
            entries[fqn] = {
                "kind": "tensor",
                "dtype": dtype_name(item.properties.dtype),
                "size": list(item.size),
                "chunks": [[list(c.offsets), list(c.sizes)] for c in item.chunks],
            }
        else:
            entries[fqn] = {"kind": "bytes"}
    crcs = checksums[1] if checksums is not None else {}
    storage = []
    for index, info in (md.storage_data or {}).items():
        entry = {
            "fqn": index.fqn,
            "offset": None if index.offset is None else list(index.offset),
            "index": index.index,
            "file": info.relative_path,
            "start": info.offset,
            "length": info.length,
        }
        if index in crcs:
            entry["crc"] = checksum.text(crcs[index])
        storage.append(entry)
    doc = {
        "entries": entries,
        "storage": storage,
        "paths": {fqn: [list(step) for step in path] for fqn, path in paths.items()},
    }
    if checksums is not None:
        doc["checksum"] = checksums[0]
    return doc


def _placed(md: Metadata, results: list[WriteResult]) -> Metadata:
    return dataclasses.replace(md, storage_data={r.index: r.storage_data for r in results})


def dcp_document(md: Metadata, results: list[WriteResult]) -> bytes:
    """DCP's ``.metadata`` (a pickle, for stock readers): ``md`` with every item's place."""
    return pickle.dumps(compat.versioned(_placed(md, results)))


def json_document(md: Metadata, paths: dict[str, Path], results: list[WriteResult],
                  crcs: list[int], algorithm: str) -> bytes:
    """``perdure.json``: ``md`` with every item's place and checksum, and the key paths."""
    sums = (algorithm, {r.index: crc for r, crc in zip(results, crcs, strict=True)})
    return json.dumps(encode_metadata(_placed(md, results), paths, sums)).encode()


def decode_checksums(doc: dict[str, Any]) -> Checksums | None:
    """The item checksums ``encode_metadata`` recorded; None for an older checkpoint."""
    algorithm = doc.get("checksum")
    if algorithm is None:
        return None
    crcs: dict[MetadataIndex, int] = {}
    for s in doc["storage"]:
        crc = checksum.parse(s.get("crc"))
        if crc is None:
            raise ValueError(f"storage entry {s.get('fqn')!r} has no valid checksum")
        crcs[MetadataIndex(s["fqn"], s["offset"], s["index"])] = crc
    return str(algorithm), crcs


def decode_metadata(doc: dict[str, Any]) -> tuple[Metadata, dict[str, Path]]:
    """Rebuild DCP ``Metadata`` and the key paths from ``encode_metadata``'s output."""
    state: dict[str, TensorStorageMetadata | BytesStorageMetadata] = {}
    for fqn, entry in doc["entries"].items():
        if entry["kind"] == "tensor":
            state[fqn] = TensorStorageMetadata(
                properties=TensorProperties(dtype=dtype_from_name(entry["dtype"])),
                size=torch.Size(entry["size"]),
                chunks=[
                    ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(s))
                    for o, s in entry["chunks"]
                ],
            )
        elif entry["kind"] == "bytes":
            state[fqn] = BytesStorageMetadata()
        else:
            raise ValueError(
                f"checkpoint metadata entry {fqn!r} has unknown kind {entry['kind']!r}"
            )
    storage: dict[MetadataIndex, Any] = {}
    for s in doc["storage"]:
        index = MetadataIndex(s["fqn"], s["offset"], s["index"])
        storage[index] = compat.storage_info(str(s["file"]), int(s["start"]), int(s["length"]))
    paths = {fqn: tuple((str(k), v) for k, v in p) for fqn, p in doc["paths"].items()}
    md = Metadata(
        state_dict_metadata=state,
        planner_data={fqn: dcp_path(p) for fqn, p in paths.items()},
        storage_data=storage,
    )
    return compat.versioned(md), paths


def dcp_path(path: Path) -> tuple[str | int, ...]:
    """DCP's own form of a path (dict keys as str, list positions as int)."""
    return tuple(str(key) if kind == "d" else int(key) for kind, key in path)
