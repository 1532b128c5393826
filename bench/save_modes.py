"""Attribution modes of bench/save_steps.py: a save with one part of its background persist
left out or done another way, to see what that part costs the training steps after it.

- `save`: as shipped;
- `blocking`: every save blocking (`async_save=False`): the whole save on the step's path;
- `no-persist`: the save stages, then its persist only makes the deferred copies;
- `collectives-only`: the persist makes the two collectives of a real one on the
  checkpoint's gloo data group (the outcomes' gather, the verdict's broadcast) and writes
  nothing;
- `store-only`: the same exchange through the job's TCPStore instead (each rank sets its row,
  rank 0 reads them all and sets the verdict, the others get it), for comparison;
- `no-fsync`: os.fsync does nothing; `no-retain`: retention removes nothing.

Bench only: each installs its change in the worker process (`install`) before the first save.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

MODES = ("none", "save", "blocking", "no-persist", "collectives-only", "store-only",
         "no-fsync", "no-retain")
ROW = 12  # ints per rank in the outcome rows of the ddp_mlp example's save (about)


def install(mode: str) -> None:
    """Put `mode`'s change in place (none for "none", "save" and "blocking")."""
    from perdure.runtime.checkpoint import commit, persist

    if mode == "no-fsync":
        os.fsync = lambda fd: None
    elif mode == "no-retain":
        commit.retain = lambda *args, **kwargs: []
    elif mode in ("no-persist", "collectives-only", "store-only"):
        exchange = {"no-persist": None, "collectives-only": _collectives,
                    "store-only": _store()}[mode]

        def run(self: Any, job: Any, stats: Any) -> str:
            if not job.copied:
                self.stage_pending(job, stats)
            if exchange is not None:
                exchange(self.comm)
            stats.name = "not-persisted"
            return "not-persisted"

        persist.Persister.run = run  # type: ignore[method-assign]


def _collectives(comm: Any) -> None:
    comm.gather_object([1] * ROW)
    comm.broadcast_object("ok")


def _store() -> Any:
    import torch.distributed as dist

    saves = itertools.count()

    def exchange(comm: Any) -> None:
        store = dist.distributed_c10d._get_default_store()
        key, rank = f"bench-save/{next(saves)}", comm.rank
        store.set(f"{key}/{rank}", b"x" * (8 * ROW))
        rows = [f"{key}/{r}" for r in range(comm.world)]
        if rank == 0:
            store.wait(rows)
            store.multi_get(rows)
            store.set(f"{key}/verdict", b"ok")
        else:
            store.get(f"{key}/verdict")

    return exchange
