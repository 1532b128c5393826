"""A plan's metadata documents, encoded once and reused: byte for byte the uncached encoding,
and a save's end as integer rows that rebuild each rank's write results exactly."""

from __future__ import annotations

import dataclasses
import json
import pickle

import torch
from torch.distributed.checkpoint.default_planner import (
    create_default_global_save_plan,
    create_default_local_save_plan,
)
from torch.distributed.checkpoint.storage import WriteResult

from perdure.runtime import compat
from perdure.runtime.checkpoint import checksum, outcome
from perdure.runtime.checkpoint.documents import Documents
from perdure.runtime.checkpoint.metadata import encode_metadata
from perdure.runtime.checkpoint.tree import flatten


def _plan() -> tuple[Documents, list[WriteResult]]:
    flat, paths = flatten({"model": {"w": torch.ones(3, 2), "b": torch.zeros(2)},
                           "optim": {"param_groups": [{"lr": 0.1, "params": ["w", "b"]}]},
                           "step": 4, "loader": {7: "x"}})
    plans, md = create_default_global_save_plan([create_default_local_save_plan(flat, True)])
    results, at = [], 0
    for n, item in enumerate(plans[0].items):
        results.append(WriteResult(item.index, 100 + n,
                                   compat.storage_info("__0_0.distcp", at, 100 + n)))
        at += 100 + n
    return Documents(md, paths), results


def _uncached(docs: Documents, results: list[WriteResult], crcs: list[int]) -> tuple[bytes, bytes]:
    md = compat.versioned(dataclasses.replace(
        docs.metadata, storage_data={r.index: r.storage_data for r in results}))
    item_crcs = {r.index: c for r, c in zip(results, crcs, strict=True)}
    doc = encode_metadata(md, docs.paths, (checksum.ALGORITHM, item_crcs))
    return pickle.dumps(md), json.dumps(doc).encode()


def test_documents_are_the_uncached_bytes_save_after_save() -> None:
    docs, results = _plan()
    for save in range(3):
        crcs = [(0x9E3779B9 * (save + 1) * (n + 1)) & 0xFFFFFFFF for n in range(len(results))]
        if save == 2:  # a plain value grew: every item after it moves
            grown = []
            at = 0
            for r in results:
                length = r.storage_data.length + (7 if r is results[0] else 0)
                grown.append(WriteResult(
                    r.index, length, compat.storage_info("__0_0.distcp", at, length)))
                at += length
            results = grown
        dcp, doc = _uncached(docs, results, crcs)
        assert docs.dcp(results) == dcp  # a stale pickle would keep the old offsets
        assert docs.json(results, crcs, checksum.ALGORITHM) == doc


def test_a_shard_travels_as_a_row_and_back() -> None:
    _, results = _plan()
    crcs = list(range(11, 11 + len(results)))
    size = sum(r.storage_data.length for r in results)
    shard = outcome.Shard(None, results, {"__0_0.distcp": size}, {"__0_0.distcp": 77}, crcs,
                          "step-00000004.tmp-x")
    width = 4 + 2 * (len(results) + 3)  # another rank writes more items: padded
    row = outcome.row_of(shard, "step-00000004.tmp-x", len(results), width)
    back = outcome.shard_of(row, 0, [r.index for r in results], "step-00000004.tmp-x")
    assert back == shard


def test_anything_but_a_clean_shard_takes_the_pickled_path() -> None:
    _, results = _plan()
    crcs = [1] * len(results)
    size = sum(r.storage_data.length for r in results)
    good = outcome.Shard(None, results, {"f": size}, {"f": 2}, crcs, "d")
    good = dataclasses.replace(good, results=[
        WriteResult(r.index, r.size_in_bytes, compat.storage_info("f", r.storage_data.offset,
                                                           r.storage_data.length))
        for r in results])
    width = 4 + 2 * len(results)
    assert outcome.row_of(good, "d", len(results), width)[0] == 0
    failed = outcome.Shard("rank 1: OSError: disk full", storage=True)
    elsewhere = dataclasses.replace(good, dir_name="e")
    fewer = dataclasses.replace(good, results=good.results[1:], item_crcs=crcs[1:])
    gap = dataclasses.replace(good, sizes={"f": size + 1})
    for bad in (failed, elsewhere, fewer, gap):
        assert outcome.row_of(bad, "d", len(results), width)[0] != 0, bad


def test_a_rank_with_nothing_to_write_travels_as_a_row_without_a_file() -> None:
    # A small replicated state is rank 0's alone (plan.SINGLE_WRITER_BYTES): rank 1 writes no
    # file, and its row says so; a file where no items are due is not clean.
    nothing = outcome.Shard(None, dir_name="d")
    row = outcome.row_of(nothing, "d", 0, 10)
    assert row[0] == 0
    assert outcome.shard_of(row, 1, [], "d") == nothing
    stray = dataclasses.replace(nothing, sizes={"__1_0.distcp": 0}, crcs={"__1_0.distcp": 0})
    for bad in (stray, dataclasses.replace(nothing, dir_name="e")):
        assert outcome.row_of(bad, "d", 0, 10)[0] != 0, bad
    _, results = _plan()
    assert outcome.row_of(nothing, "d", len(results), 4 + 2 * len(results))[0] != 0
