"""All-reduce checks: among a node's GPUs (NCCL), and between the job's nodes (`--peers`:
gloo on CPU, NCCL on GPUs), each with a bandwidth floor.

Side effects: starts processes (one per GPU), opens a TCP rendezvous, moves data. Results
are `node.Result`s; nothing here prints or exits.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from typing import Any

from perdure.checks.node import MIB, Result

ALL_REDUCE_MB = 64
ROUNDS = 5
TIMEOUT = datetime.timedelta(seconds=60)


def bus_gbps(size_bytes: int, seconds: float, world: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: what each link carried, in GB/s."""
    if world < 2 or seconds <= 0:
        return float("inf")
    return size_bytes * 2 * (world - 1) / world / seconds / 1e9


def _timed_all_reduce(device: str) -> tuple[float, bool]:
    """Seconds per all-reduce of ALL_REDUCE_MB (best of ROUNDS), and whether the sum is right."""
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    x = torch.full((ALL_REDUCE_MB * MIB // 4,), float(rank + 1), device=device)
    dist.all_reduce(x)  # warm up: connections, buffers
    best = float("inf")
    for _ in range(ROUNDS):
        x.fill_(float(rank + 1))
        if device != "cpu":
            torch.cuda.synchronize()
        began = time.perf_counter()
        dist.all_reduce(x)
        if device != "cpu":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - began)
    want = world * (world + 1) / 2
    return best, bool((x == want).all().item())


def _gpu_rank(rank: int, world: int, port: int, results: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=TIMEOUT)
    try:
        results[rank] = _timed_all_reduce(f"cuda:{rank}")
    finally:
        dist.destroy_process_group()


def node_gpus(min_gbps: float) -> Result | None:
    """An NCCL all-reduce among this node's GPUs (None without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return None
    import torch.multiprocessing as mp

    world = torch.cuda.device_count()
    results = mp.Manager().dict()
    try:
        mp.spawn(  # type: ignore[attr-defined, no-untyped-call]
            _gpu_rank, args=(world, free_port(), results), nprocs=world, join=True)
    except Exception as exc:  # a rank's failure, as torch.multiprocessing reports it
        return Result("nccl all-reduce", False, f"{world} GPUs: {str(exc).strip()[-300:]}")
    seconds = max(s for s, _ in results.values())
    right = all(r for _, r in results.values())
    return _verdict("nccl all-reduce", f"{world} GPUs", seconds, right, world, min_gbps)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _verdict(name: str, what: str, seconds: float, right: bool, world: int,
             min_gbps: float) -> Result:
    rate = bus_gbps(ALL_REDUCE_MB * MIB, seconds, world)
    shown = "one GPU, nothing to move" if rate == float("inf") else f"{rate:.2f} GB/s"
    return Result(name, right and rate >= min_gbps,
                  f"{what}, {ALL_REDUCE_MB} MiB: {shown} bus bandwidth (floor {min_gbps:g} "
                  f"GB/s){'' if right else '; WRONG SUM'}")


def peers(address: str, rank: int, world: int, min_gbps: float) -> Result:
    """An all-reduce between the job's nodes, this one being `rank` of `world`; every node
    runs the same command with its own rank and the same `address` (HOST:PORT of rank 0)."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    backend, device = ("nccl", "cuda:0") if cuda else ("gloo", "cpu")
    try:
        dist.init_process_group(backend, init_method=f"tcp://{address}", rank=rank,
                                world_size=world, timeout=TIMEOUT)
    except Exception as exc:  # no rendezvous: a peer missing, a port refused, a timeout
        return Result("peers all-reduce", False, f"rendezvous at {address} failed: {exc}")
    try:
        seconds, right = _timed_all_reduce(device)
    except Exception as exc:
        return Result("peers all-reduce", False, f"{backend}: {exc}")
    finally:
        dist.destroy_process_group()
    return _verdict("peers all-reduce", f"{backend}, rank {rank} of {world} nodes", seconds,
                    right, world, min_gbps)


def environment_rank() -> tuple[int, int]:
    """This node's rank and the node count from torchrun's variables (GROUP_RANK, ...)."""
    return (int(os.environ.get("GROUP_RANK", os.environ.get("RANK", "0"))),
            int(os.environ.get("GROUP_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))))
