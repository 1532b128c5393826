"""The checkpoint's small integer collectives on real gloo ranks: kept buffers never mix one
call's values with another's, whatever the lengths, groups and order of the calls."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from forked_ranks import in_gloo_group, run_ranks

from perdure.runtime.checkpoint.comm import Comm

WORLD = 3
BIG = 2**62 + 12345  # beyond what float64 holds exactly


def _rank_main(rank: int, store: str, out: str) -> None:
    def body() -> dict[str, Any]:
        comm = Comm(60.0)
        got: dict[str, Any] = {"rows": [], "casts": []}
        for call in range(4):  # the same lengths again: the kept buffers are reused
            got["rows"].append(comm.all_gather_ints([rank, call, -rank - BIG]))
            got["rows"].append(comm.agree([rank * 10 + call]))
            got["rows"].append(comm.all_gather_ints([call] * 5 + [rank]))
            got["casts"].append(comm.broadcast_int(-BIG - call if rank == 0 else rank))
        return got

    in_gloo_group(rank, WORLD, store, out, body)


def test_int_collectives_give_every_rank_every_row_exactly(tmp_path: Path) -> None:
    out = tmp_path / uuid.uuid4().hex
    out.mkdir()
    results = run_ranks(out, WORLD, _rank_main, str(out / "store"), str(out), timeout=60)
    ranks = range(WORLD)
    rows = []
    for call in range(4):
        rows += [[[r, call, -r - BIG] for r in ranks], [[r * 10 + call] for r in ranks],
                 [[call] * 5 + [r] for r in ranks]]
    for got in results:
        assert got["rows"] == rows
        assert got["casts"] == [-BIG - call for call in range(4)]
