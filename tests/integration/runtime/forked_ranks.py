"""Run one function per rank in processes forked from the test (torch already imported)."""

from __future__ import annotations

import json
import multiprocessing as mp
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
