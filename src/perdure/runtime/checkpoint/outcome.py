"""The end of a save: each rank's shard outcome reaches rank 0, and rank 0's verdict every rank.

When every rank wrote its shard (the usual case) the ranks exchange integers, not objects:
one all-gather of a fixed-size row per rank (status, a key of the directory written, the
file's size and checksum, each item's length and checksum), then one broadcast of one int
(the verdict is "ok", under the name every rank expects). Rank 0 rebuilds every rank's
write results from the plan, which says which items each rank writes and in which order
(items are written back to back from offset 0).
A pickled gather and broadcast cost most of a small save's persist in each rank's CPU;
these two small tensor collectives cost a fraction of that.

Anything else (a rank that failed, ranks that wrote to different directories) takes the
pickled path, which carries the error texts: every rank sees every row, so all ranks choose
the same path. Any other verdict follows, pickled.

Side effects: collectives on the checkpoint's data group.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.checkpoint.storage import WriteResult

from perdure.runtime import compat
from perdure.runtime.checkpoint.comm import Comm
from perdure.runtime.checkpoint.writer import shard_name

Layout = list[list[MetadataIndex]]
"""Each rank's write items, in the order it writes them."""

_HEAD = 4  # status, directory key, file size, file checksum; then (length, checksum) per item
_OK, _FAILED = 0, 1


@dataclass
class Shard:
    """One rank's outcome of writing its shard, as rank 0 gathers it (error: why it failed)."""

    error: str | None
    results: list[WriteResult] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)
    crcs: dict[str, int] = field(default_factory=dict)  # file -> checksum of the whole file
    item_crcs: list[int] = field(default_factory=list)  # one per result
    dir_name: str = ""
    storage: bool = False  # the error came from the storage, not from the state


def dir_key(name: str) -> int:
    """A 56-bit key of a save's directory name, for the ranks to compare. No side effects."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=7).digest(), "little")


def row_of(shard: Shard, dir_name: str, items: int, width: int) -> list[int]:
    """``shard`` as a row of ``width`` ints; status _FAILED unless it is a success of
    ``items`` items written back to back from offset 0 into ``dir_name``. No side effects."""
    row = [0] * width
    row[0] = _FAILED
    if (shard.error is not None or shard.dir_name != dir_name
            or len(shard.sizes) != (1 if items else 0)
            or len(shard.results) != items or len(shard.item_crcs) != items):
        return row
    if not items:  # a rank with nothing to write writes no file
        row[:_HEAD] = [_OK, dir_key(dir_name), 0, 0]
        return row
    [(file, size)] = shard.sizes.items()
    at = 0
    for i, (result, crc) in enumerate(zip(shard.results, shard.item_crcs, strict=True)):
        info = result.storage_data
        if info.relative_path != file or info.offset != at:
            return row
        row[_HEAD + 2 * i], row[_HEAD + 2 * i + 1] = info.length, crc
        at += info.length
    if at != size:
        return row
    row[:_HEAD] = [_OK, dir_key(dir_name), size, shard.crcs[file]]
    return row


def shard_of(row: list[int], rank: int, items: list[MetadataIndex], dir_name: str) -> Shard:
    """The Shard that ``row_of`` encoded for ``rank``, which writes ``items``. No side
    effects."""
    if not items:
        return Shard(None, dir_name=dir_name)
    file = shard_name(rank)
    results: list[WriteResult] = []
    crcs: list[int] = []
    at = 0
    for i, index in enumerate(items):
        length, crc = row[_HEAD + 2 * i], row[_HEAD + 2 * i + 1]
        results.append(WriteResult(index, length, compat.storage_info(file, at, length)))
        crcs.append(crc)
        at += length
    return Shard(None, results, {file: row[2]}, {file: row[3]}, crcs, dir_name)


def gather(comm: Comm, mine: Shard, layout: Layout, dir_name: str) -> list[Shard] | None:
    """Every rank's Shard on rank 0 (None elsewhere); collective."""
    if comm.world == 1:
        return [mine]
    width = _HEAD + 2 * max(len(items) for items in layout)
    rows = comm.all_gather_ints(row_of(mine, dir_name, len(layout[comm.rank]), width))
    if any(row[0] != _OK for row in rows) or len({row[1] for row in rows}) != 1:
        return comm.gather_object(mine)  # every rank saw the same rows: all come here
    if comm.rank != 0:
        return None
    return [shard_of(row, rank, layout[rank], dir_name) for rank, row in enumerate(rows)]


def announce(comm: Comm, verdict: tuple[str, str] | None, committed: str) -> tuple[str, str]:
    """Rank 0's ``verdict`` (kind, committed name or reason) on every rank; ``committed``:
    the name an "ok" verdict usually carries, which every rank knows. Collective."""
    if comm.world == 1:
        assert verdict is not None
        return verdict
    usual = comm.rank == 0 and verdict == ("ok", committed)
    if comm.broadcast_int(0 if usual else 1) == 0:  # rank 0's value counts
        return ("ok", committed)
    kind, text = comm.broadcast_object(verdict)
    return str(kind), str(text)
