"""perdure.runtime.envstore on real gloo ranks: a group whose rank 0 (the store's host) starts
late comes up as soon as rank 0 listens, not after torch's connect backoff."""

from __future__ import annotations

import datetime
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist
from forked_ranks import as_rank, run_ranks

from perdure.runtime import envstore

WORLD = 3
LATE = 0.3  # rank 0 starts this long after the others


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(rank: int, port: int, out: str, install: bool, t0: float) -> None:
    def body() -> dict[str, float]:
        if rank == 0:
            time.sleep(max(0.0, t0 + LATE - time.time()))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1")
        if install:
            assert envstore.install() and envstore.install()  # idempotent
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
        up = time.time()
        x = torch.ones(1)
        dist.all_reduce(x)
        return {"up": up, "sum": float(x[0])}

    as_rank(rank, out, body)


def _group_up_after_rank0(tmp_path: Path, install: bool) -> float:
    """Seconds from rank 0's start to the last rank's process group being up."""
    out = tmp_path / ("with" if install else "without")
    out.mkdir()
    t0 = time.time() + 0.2
    results = run_ranks(out, WORLD, _rank_main, _free_port(), str(out), install, t0)
    assert all(r["sum"] == WORLD for r in results)
    return max(r["up"] for r in results) - (t0 + LATE)


def test_clients_connect_as_soon_as_rank0_listens(tmp_path: Path) -> None:
    # torch alone: the clients were refused and back off (measured ~0.5 s more)
    with_wait = _group_up_after_rank0(tmp_path, install=True)
    print(f"group up {with_wait:.3f}s after rank 0 started")
    assert with_wait < 0.2, f"the group came up {with_wait:.2f}s after rank 0 started"


def test_the_store_host_and_unset_environments_do_not_wait() -> None:
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "1"}
    assert envstore.store_address("env://", env) == ("127.0.0.1", 29500)
    assert envstore.store_address("env://", {**env, "RANK": "0"}) is None
    assert envstore.store_address("env://?rank=0", env) is None  # the URL's rank wins
    agent = {**env, "RANK": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    assert envstore.store_address("env://", agent) == ("127.0.0.1", 29500)
    assert envstore.store_address("env://", {**env, "MASTER_PORT": ""}) is None
    assert envstore.store_address("env://", {"RANK": "1"}) is None
