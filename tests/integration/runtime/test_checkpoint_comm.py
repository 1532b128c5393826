"""The checkpoint's small integer collectives on real gloo ranks: kept buffers never mix one
call's values with another's, whatever the lengths, groups and order of the calls."""

from __future__ import annotations

import json
import os
import traceback
import uuid
from pathlib import Path
from typing import Any

import torch.distributed as dist
from forked_ranks import run_ranks

from perdure.runtime.checkpoint.ahead import PendingVotes
from perdure.runtime.checkpoint.comm import Comm

WORLD = 3
BIG = 2**62 + 12345  # beyond what float64 holds exactly


def _rank_main(rank: int, store: str, out: str) -> None:
    code = 0
    try:
        os.environ["OMP_NUM_THREADS"] = "1"
        file_store = dist.FileStore(store, WORLD)  # type: ignore[attr-defined,unused-ignore]
        dist.init_process_group("gloo", store=file_store, rank=rank, world_size=WORLD)
        comm = Comm(60.0)
        got: dict[str, Any] = {"rows": [], "casts": []}
        for call in range(4):  # the same lengths again: the kept buffers are reused
            got["rows"].append(comm.all_gather_ints([rank, call, -rank - BIG]))
            got["rows"].append(comm.agree([rank * 10 + call]))
            got["rows"].append(comm.all_gather_ints([call] * 5 + [rank]))
            got["casts"].append(comm.broadcast_int(-BIG - call if rank == 0 else rank))
        votes = PendingVotes(comm.control_group, comm.world, [1, rank, BIG])
        got["votes"] = votes.result()
        assert votes.result() is got["votes"]  # read once, then kept
        Path(out, f"{rank}.json").write_text(json.dumps(got))
    except BaseException:
        Path(out, f"{rank}.error").write_text(traceback.format_exc())
        code = 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os._exit(code)


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
        assert got["votes"] == [[1, r, BIG] for r in ranks]
