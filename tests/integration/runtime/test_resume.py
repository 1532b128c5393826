"""perdure.runtime.resume on real gloo ranks: a new set of processes resumes from the node-local
snapshot when every rank holds one at least as new as the newest committed checkpoint, and
from the checkpoint otherwise (dropping the snapshots of the history it rolls back)."""

from __future__ import annotations

import hashlib
import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from forked_ranks import run_ranks
from torch import nn

from perdure.runtime import Checkpointer, resume, rng_state
from perdure.runtime.checkpoint import RankLocal

WORLD = 2


def _digest(model: nn.Module, step: int, rng: Any) -> str:
    h = hashlib.sha256(str(step).encode())
    for _, t in sorted(model.state_dict().items()):
        h.update(t.numpy().tobytes())
    h.update(repr(rng).encode())
    return h.hexdigest()


def _train(rank: int, root: Path) -> dict[str, Any]:
    """Steps 1..6: snapshots at 2 and 6, a committed checkpoint at 4; each step's digest.
    The model is the same on every rank (as DDP keeps it); the RNG state differs."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    torch.manual_seed(rank)
    ckpt = Checkpointer(str(root / "ckpt"), async_save=False)
    snap = resume.node_snapshotter()
    assert snap is not None
    digests = {}
    for step in range(1, 7):
        model(torch.randn(3, 4, generator=torch.Generator().manual_seed(step))).sum().backward()
        opt.step()
        torch.rand(rank + 1)  # each rank's RNG moves on its own
        state = {"model": model, "optim": opt, "step": step, "rng": RankLocal(rng_state())}
        if step == 4:
            ckpt.save(step, state)
        if step in (2, 6):
            assert snap.save(step, state)
            snap.join()
        digests[step] = _digest(model, step, state["rng"].value)
    ckpt.close()
    snap.close()
    return {"digests": digests}


def _restore(rank: int, root: Path) -> dict[str, Any]:
    torch.manual_seed(100 + rank)  # different weights and RNG: the restore must replace them
    model = nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    state: dict[str, Any] = {"model": model, "optim": opt, "step": 0,
                             "rng": RankLocal(rng_state())}
    ckpt = Checkpointer(str(root / "ckpt"))
    restored = resume.restore_newest(state, ckpt, resume.node_snapshotter())
    ckpt.close()
    files = sorted(p.name for p in Path(os.environ[resume.ENV_NODE_DIR]).rglob("snap-*.bin")
                   if p.parent.name == f"worker-{rank}")
    return {"step": restored.step, "source": restored.source, "files": files,
            "digest": _digest(model, int(state["step"]), state["rng"].value)}


def _rank_main(rank: int, root: str, phase: str) -> None:
    code = 0
    out = Path(root, phase)
    try:
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1",
                          PERDURE_REPLICA=f"worker-{rank}", PERDURE_JOB_ID="job",
                          PERDURE_NODE_DIR=str(Path(root, "node")))
        store = dist.FileStore(str(out / "store"), WORLD)  # type: ignore[attr-defined,unused-ignore]
        dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD)
        work: Callable[[int, Path], dict[str, Any]] = _train if phase == "train" else _restore
        (out / f"{rank}.json").write_text(json.dumps(work(rank, Path(root))))
    except BaseException:
        (out / f"{rank}.error").write_text(traceback.format_exc())
        code = 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os._exit(code)


def _phase(root: Path, phase: str) -> list[dict[str, Any]]:
    (root / phase).mkdir()
    return run_ranks(root / phase, WORLD, _rank_main, str(root), phase)


def test_newest_common_snapshot_wins_else_the_checkpoint(tmp_path: Path) -> None:
    trained = _phase(tmp_path, "train")
    # every rank holds snapshot 6, newer than checkpoint 4: the snapshot
    first = _phase(tmp_path, "restore-1")
    assert [(r["step"], r["source"]) for r in first] == [(6, "snapshot (file)")] * WORLD
    assert [r["digest"] for r in first] == [t["digests"]["6"] for t in trained]
    # rank 1 lost snapshot 6 (killed while writing it): the newest common snapshot is 2,
    # older than checkpoint 4, so the checkpoint; rank 0's snapshot 6 is dropped with the
    # history rolled back
    for path in (tmp_path / "node").rglob("worker-1/snap-000000000006.bin"):
        path.unlink()
    second = _phase(tmp_path, "restore-2")
    assert [(r["step"], r["source"]) for r in second] == [(4, "checkpoint")] * WORLD
    assert [r["digest"] for r in second] == [t["digests"]["4"] for t in trained]
    assert [r["files"] for r in second] == [["snap-000000000002.bin"]] * WORLD


def test_outside_perdure_there_is_no_node_snapshotter(monkeypatch: Any) -> None:
    monkeypatch.delenv(resume.ENV_NODE_DIR, raising=False)
    assert resume.node_snapshotter() is None
