"""Run one function per rank in processes forked from the test (torch already imported)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run_ranks(out: Path, world: int, target: Callable[..., None], *args: Any,
              timeout: float = 120) -> list[dict[str, Any]]:
    """Fork `target(rank, *args)` for every rank; each writes `out/<rank>.json`, or
    `out/<rank>.error` with its traceback (the first one fails the test)."""
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=target, args=(r, *args)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout)
        if p.is_alive():
            p.kill()
    errors = [f.read_text() for f in sorted(out.glob("*.error"))]
    assert not errors, errors[0]
    return [json.loads((out / f"{r}.json").read_text()) for r in range(world)]


def as_rank(rank: int, out: str, body: Callable[[], Any]) -> None:
    """In a forked rank: write what `body()` returns to `out/<rank>.json` (or its traceback to
    `out/<rank>.error`), leave any process group, then leave the process."""
    import torch.distributed as dist

    code = 0
    try:
        Path(out, f"{rank}.json").write_text(json.dumps(body()))
    except BaseException:
        Path(out, f"{rank}.error").write_text(traceback.format_exc())
        code = 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os._exit(code)  # never hang in gloo's teardown (MACHINE-NOTES)


def in_gloo_group(rank: int, world: int, store: str, out: str, body: Callable[[], Any]) -> None:
    """`as_rank`, with `body` run as rank `rank` of a gloo group over the FileStore `store`."""
    import torch.distributed as dist

    def joined() -> Any:
        os.environ["OMP_NUM_THREADS"] = "1"
        file_store = dist.FileStore(store, world)  # type: ignore[attr-defined,unused-ignore]
        dist.init_process_group("gloo", store=file_store, rank=rank, world_size=world)
        return body()

    as_rank(rank, out, joined)
