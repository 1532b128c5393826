"""A plan's two metadata documents, written by every save of the plan: DCP's ``.metadata``
(a pickle) and perdure's ``perdure.json``, encoded with what stays the same done once.

Most of both documents is decided by the plan alone (keys, dtypes, shapes, paths); a save only
adds where each item landed in the shard files and its checksum. So the JSON's plan-only parts
and each storage entry's fixed fields are encoded once per plan, and DCP's pickle is reused
for as long as every item keeps its place (file, offset, length): a fixed layout always does.
The bytes are exactly ``pickle.dumps`` of the Metadata and ``json.dumps(encode_metadata(...))``
(the readers, perdure's and stock DCP's, see no difference); a new plan starts a new cache.

No side effects.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from collections.abc import Hashable
from dataclasses import dataclass, field

from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.storage import WriteResult

from perdure.runtime import compat
from perdure.runtime.checkpoint import checksum
from perdure.runtime.checkpoint.metadata import Path, encode_metadata


@dataclass
class Documents:
    """The documents of one plan (``metadata`` without storage locations, the key paths)."""

    metadata: Metadata
    paths: dict[str, Path]
    _entries: str = field(init=False, default="")
    _paths: str = field(init=False, default="")
    _fixed: dict[tuple[MetadataIndex, str], str] = field(init=False, default_factory=dict)
    _dcp: tuple[Hashable, bytes] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        doc = encode_metadata(self.metadata, self.paths)
        self._entries = json.dumps(doc["entries"])
        self._paths = json.dumps(doc["paths"])

    def dcp(self, results: list[WriteResult]) -> bytes:
        """DCP's ``.metadata``: the plan's Metadata with every item's place in the files."""
        places = tuple((r.storage_data.relative_path, r.storage_data.offset,
                        r.storage_data.length) for r in results)
        if self._dcp is None or self._dcp[0] != places:
            md = compat.versioned(dataclasses.replace(
                self.metadata, storage_data={r.index: r.storage_data for r in results}))
            self._dcp = (places, pickle.dumps(md))
        return self._dcp[1]

    def json(self, results: list[WriteResult], crcs: list[int], algorithm: str) -> bytes:
        """``perdure.json``: the layout, every item's place and checksum (``crcs``, one per
        result, computed with ``algorithm``), and the key paths."""
        storage = []
        for result, crc in zip(results, crcs, strict=True):
            info = result.storage_data
            fixed = self._fixed.get((result.index, info.relative_path))
            if fixed is None:  # json.dumps of the entry's first fields, without its "}"
                index = result.index
                fixed = json.dumps({
                    "fqn": index.fqn,
                    "offset": None if index.offset is None else list(index.offset),
                    "index": index.index,
                    "file": info.relative_path,
                })[:-1]
                self._fixed[(index, info.relative_path)] = fixed
            storage.append(f'{fixed}, "start": {int(info.offset)}, "length": '
                           f'{int(info.length)}, "crc": "{checksum.text(crc)}"}}')
        return (f'{{"entries": {self._entries}, "storage": [{", ".join(storage)}], '
                f'"paths": {self._paths}, "checksum": {json.dumps(algorithm)}}}').encode()
