"""Two ranks on one host staging saves for a remote store: each stages in a directory of its
own (named after the checkpoint URL, the job, its attempt and the rank), never in a shared one
that one rank's cleanup empties under the other."""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from forked_ranks import run_ranks

from perdure.runtime.checkpoint import Checkpointer, RankLocal
from perdure.runtime.checkpoint.persist import rank_staging

WORLD = 2
SAVES = 6


def _rank_main(rank: int, tmp: str) -> None:
    code = 0
    try:
        # What perdure's local backend gives two replicas of one job on one node.
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK="0",
                          OMP_NUM_THREADS="1", PERDURE_JOB_ID="stage-1", PERDURE_ATTEMPT="1",
                          PERDURE_STAGING_DIR=f"{tmp}/staging")
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank,
                                world_size=WORLD)
        # `local://` is fsspec's local file system without rename: saves are staged and
        # uploaded, as to a bucket; the per-rank values make every rank write a big shard.
        ckpt = Checkpointer(f"local://{tmp}/ckpt", keep=2)
        seen: list[str] = []
        for step in range(1, SAVES + 1):
            big = torch.full((1 << 20,), float(step * 10 + rank))
            ckpt.save(step, {"mine": RankLocal(big), "step": step}, blocking=True)
            assert ckpt.staging_dir is not None
            seen.append(str(rank_staging(ckpt.staging_dir, ckpt.url, rank)))
        ckpt.close()
        Path(tmp, f"{rank}.json").write_text(json.dumps({"steps": ckpt.steps(),
                                                         "staging": seen[-1]}))
    except BaseException:
        Path(tmp, f"{rank}.error").write_text(traceback.format_exc())
        code = 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os._exit(code)


def test_two_ranks_on_one_host_stage_apart_and_every_save_commits(tmp_path: Path) -> None:
    results = run_ranks(tmp_path, WORLD, _rank_main, str(tmp_path))
    assert [r["steps"] for r in results] == [[SAVES - 1, SAVES]] * WORLD
    assert results[0]["staging"] != results[1]["staging"]
    for rank, r in enumerate(results):
        name = Path(r["staging"]).name
        assert name.startswith("stage-1-a1-") and name.endswith(f"-rank{rank}")
    assert not list((tmp_path / "staging").rglob("*.distcp"))  # uploads leave nothing behind
