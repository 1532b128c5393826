"""The CUDA paths of the runtime and the control plane, on a real GPU (`make test-gpu`).

Every test here is marked `gpu` and skips without CUDA (torch.cuda.is_available()); nothing
else in the suite needs a GPU. What runs here: CUDA RNG capture and restore, async saves that
stage GPU tensors through page-locked host memory (thread and process mode) and restore onto
the GPU, a replica's device choice from LOCAL_RANK under `perdure run` with discovered GPUs,
and NCCL's failures as the failure policy names them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch import nn

from perdure.runtime.checkpoint import Checkpointer
from perdure.runtime.checkpoint.comm import Comm
from perdure.runtime.checkpoint.plan import make_plan
from perdure.runtime.checkpoint.staging import HostBuffers
from perdure.runtime.checkpoint.state import state_tree
from perdure.runtime.checkpoint.tree import flatten
from perdure.runtime.rng import rng_state, seed_everything, set_rng_state

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (make test-gpu)"),
]
PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def cuda_model(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 8)).cuda()
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        x = torch.randn(16, 64, device="cuda", generator=torch.Generator("cuda").manual_seed(step))
        model(x).pow(2).mean().backward()
        optim.step()
        optim.zero_grad()
    return model, optim


def test_cuda_rng_of_every_device_round_trips() -> None:
    seed_everything(7)
    torch.rand(3, device="cuda")
    state = rng_state()
    assert len(state["cuda"]) == torch.cuda.device_count()
    expected = [torch.rand(5, device=f"cuda:{d}").tolist()
                for d in range(torch.cuda.device_count())]
    torch.rand(100, device="cuda")
    set_rng_state(state)
    assert [torch.rand(5, device=f"cuda:{d}").tolist()
            for d in range(torch.cuda.device_count())] == expected


@pytest.mark.parametrize("shared", [False, True], ids=["thread", "process"])
def test_gpu_tensors_stage_into_pinned_host_buffers(shared: bool) -> None:
    model, optim = cuda_model()
    state = {"model": model, "optim": optim}
    flat, paths = flatten(state_tree(state, 0))
    plan = make_plan(flat, paths, (), "t", Comm(60))
    buffers = HostBuffers(plan.items, shared=shared, pin=True)
    try:
        if shared:
            assert buffers.pinned_bytes > 0  # the memfd mapping was page-locked for CUDA
        else:
            assert all(t.is_pinned() for t in buffers.tensors.values())
        staged, pending = buffers.stage(flat)
        assert pending == []  # device tensors are copied before save returns
        for item in staged:
            if item.tensor is not None:
                assert item.tensor.device.type == "cpu"
        weight = model[0].weight.detach().cpu()
        assert any(item.tensor is not None and item.tensor.shape == weight.shape
                   and torch.equal(item.tensor, weight) for item in staged)
    finally:
        buffers.close()


@pytest.mark.parametrize("persist", ["thread", "process"])
def test_async_save_of_a_gpu_model_restores_onto_the_gpu(tmp_path: Path, persist: str) -> None:
    model, optim = cuda_model(0)
    with Checkpointer(tmp_path / "ckpt", persist=persist) as ckpt:
        ckpt.save(3, {"model": model, "optim": optim})
        ckpt.wait()
    expected = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    fresh, fresh_optim = cuda_model(1)
    with Checkpointer(tmp_path / "ckpt", persist=persist) as ckpt:
        assert ckpt.restore_latest({"model": fresh, "optim": fresh_optim}) == 3
    for key, value in fresh.state_dict().items():
        assert value.device.type == "cuda"
        assert torch.equal(value.cpu(), expected[key]), key


def run_job(tmp_path: Path, pool: dict[str, Any], code: str, timeout: float = 300
            ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "gpujob", "pools": [
        {"name": "worker", "command": ["python", "-c", code], **pool}],
        "env": {"OUT": str(tmp_path)}}))
    state = ["--state-dir", str(tmp_path / "state")]
    run = subprocess.run([*PERDURE, *state, "run", str(spec)], capture_output=True, text=True,
                         timeout=timeout, check=False)
    described = subprocess.run([*PERDURE, *state, "describe", "gpujob", "--json"],
                               capture_output=True, text=True, timeout=60, check=True)
    return run, json.loads(described.stdout)


SEES = ("import os, json, torch, perdure; ctx = perdure.init(); "
        "open(os.path.join(os.environ['OUT'], f'seen-{ctx.rank}.json'), 'w').write(json.dumps("
        "{'visible': os.environ.get('CUDA_VISIBLE_DEVICES'), 'count': torch.cuda.device_count(),"
        " 'device': torch.cuda.current_device()})); ctx.finish(0)")


def test_a_replica_sees_only_its_gpus_and_init_picks_its_device(tmp_path: Path) -> None:
    """Discovery on a real host (no `gpus` in any cluster file): nvidia-smi or the variable."""
    os.environ.pop("PERDURE_STATE_DIR", None)
    run, d = run_job(tmp_path, {"replicas": 1, "gpus": 1}, SEES)
    assert run.returncode == 0, run.stdout + run.stderr
    seen = json.loads((tmp_path / "seen-0.json").read_text())
    assert seen["count"] == 1 and seen["device"] == 0 and seen["visible"]
    assert d["replicas"][0]["gpus"] == 1 and len(d["replicas"][0]["devices"]) == 1


NCCL_DUPLICATE = ("import os, torch, torch.distributed as dist; "
                  "torch.cuda.set_device(0); dist.init_process_group('nccl'); "
                  "t = torch.ones(1, device='cuda'); dist.all_reduce(t); torch.cuda.synchronize()")


def test_two_ranks_on_one_gpu_is_nccl_invalid_usage(tmp_path: Path) -> None:
    """Both local ranks pick GPU 0 (the script's bug): NCCL refuses, the job fails at once."""
    run, d = run_job(tmp_path, {"replicas": 1, "procs_per_replica": 2,
                                "env": {"CUDA_VISIBLE_DEVICES": "0"}}, NCCL_DUPLICATE)
    assert run.returncode != 0
    assert d["state"] == "FAILED", d["events"][-5:]
    assert "NCCL invalid usage" in d["error"]["message"], d["error"]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_a_collective_timeout_is_named_and_restarted(tmp_path: Path) -> None:
    code = ("import os, time, datetime, torch, torch.distributed as dist; "
            "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])); "
            "dist.init_process_group('nccl', timeout=datetime.timedelta(seconds=5)); "
            "t = torch.ones(1, device='cuda'); dist.all_reduce(t); torch.cuda.synchronize(); "
            "restarts = int(os.environ['PERDURE_RESTART_COUNT']); "
            "time.sleep(60) if os.environ['RANK'] == '1' and restarts == 0 else None; "
            "dist.all_reduce(t); torch.cuda.synchronize()")
    run, d = run_job(tmp_path, {"replicas": 1, "procs_per_replica": 2, "gpus": 2}, code)
    decisions = [e["message"] for e in d["events"] if e["kind"] == "decision"]
    assert any("NCCL collective timeout" in m for m in decisions), decisions
    assert run.returncode == 0 and d["state"] == "SUCCEEDED", decisions
