"""The local backend finds this host's GPUs: CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`.

`nvidia-smi` here is a stand-in script on PATH (a real subprocess); no GPU is needed.
"""

from __future__ import annotations

import os
from pathlib import Path

from perdure.backends.local.gpus import host_gpus, local_nodes
from perdure.core.clusterspec import NodeSpec
from perdure.runtime.abort import parse_abort

LISTING = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-2222-3333-4444-555555555555)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-66666666-7777-8888-9999-000000000000)
GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee)
"""


def fake_smi(tmp_path: Path, listing: str, status: int = 0) -> dict[str, str]:
    tool = tmp_path / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n[ \"$1\" = -L ] || exit 9\ncat <<'EOF'\n{listing}EOF\n"
                    f"exit {status}\n")
    tool.chmod(0o755)
    return {"PATH": f"{tmp_path}:{os.environ['PATH']}"}


def test_nvidia_smi_lists_the_gpus(tmp_path: Path) -> None:
    assert host_gpus(fake_smi(tmp_path, LISTING)) == ["0", "1", "2"]


def test_cuda_visible_devices_wins_over_nvidia_smi(tmp_path: Path) -> None:
    env = {**fake_smi(tmp_path, LISTING), "CUDA_VISIBLE_DEVICES": "2,0"}
    assert host_gpus(env) == ["2", "0"]
    assert host_gpus({**env, "CUDA_VISIBLE_DEVICES": ""}) == []
    assert host_gpus({**env, "CUDA_VISIBLE_DEVICES": "1,-1,0"}) == ["1"]  # as CUDA reads it


def test_no_tool_or_a_failing_one_means_no_gpus(tmp_path: Path) -> None:
    assert host_gpus({"PATH": str(tmp_path / "empty")}) == []
    assert host_gpus(fake_smi(tmp_path, "NVIDIA-SMI has failed\n", status=9)) == []


def test_nodes_without_gpus_share_the_hosts_declared_ones_take_theirs(tmp_path: Path) -> None:
    env = fake_smi(tmp_path, LISTING)
    nodes = local_nodes([NodeSpec(name="a", slots=4, gpus=1), NodeSpec(name="b", slots=4)], env)
    assert [(n.gpus, n.gpu_ids) for n in nodes] == [(1, ("0",)), (2, ("1", "2"))]
    none = local_nodes([NodeSpec(name="a", slots=4, gpus=0)], {"PATH": "/nonexistent"})
    assert none[0].gpus == 0


def test_the_nccl_watchdogs_abort_is_read_from_stderr() -> None:
    tail = ("[rank1]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE) ran for "
            "5084 milliseconds before timing out.\n"
            "[rank1]: terminate called after throwing an instance of 'c10::DistBackendError'\n"
            "[rank1]:   what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog "
            "thread terminated with exception: [Rank 1] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE) ran for 5084 milliseconds before "
            "timing out.\n")
    error = parse_abort(tail)
    assert error is not None and error["type"] == "DistBackendError"
    assert "Watchdog caught collective operation timeout" in error["message"]
    assert parse_abort("Traceback (most recent call last):\nValueError: x\n") is None
