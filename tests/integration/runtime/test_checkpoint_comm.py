"""The ranks' agreement on real gloo ranks: every rank gets every rank's row exactly, whatever
the lengths of the calls."""

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
        got: dict[str, Any] = {"rows": []}
        for call in range(2):
            got["rows"].append(comm.agree([rank, call, -rank - BIG]))
            got["rows"].append(comm.agree([rank * 10 + call]))
        return got

    in_gloo_group(rank, WORLD, store, out, body)


def test_agree_gives_every_rank_every_row_exactly(tmp_path: Path) -> None:
    out = tmp_path / uuid.uuid4().hex
    out.mkdir()
    results = run_ranks(out, WORLD, _rank_main, str(out / "store"), str(out), timeout=60)
    ranks = range(WORLD)
    rows = []
    for call in range(2):
        rows += [[[r, call, -r - BIG] for r in ranks], [[r * 10 + call] for r in ranks]]
    for got in results:
        assert got["rows"] == rows
