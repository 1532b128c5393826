"""`perdure health-check`: is this node fit for replicas? One line per check; exit 0 iff all
pass. The cluster file's `health: preflight: [perdure, health-check]` runs it on each node
before an attempt's replicas start there."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from perdure.checks import collective, node
from perdure.checks.node import Floors, Result
from perdure.cli.common import Ctx


def health_check(
    c: typer.Context,
    min_cpu_gflops: Annotated[float, typer.Option(help="CPU matmul floor.")] = 1.0,
    min_memory_mb: Annotated[int, typer.Option(help="Available memory floor.")] = 1024,
    min_free_gb: Annotated[float, typer.Option(help="Free space floor of each dir.")] = 1.0,
    min_gpu_tflops: Annotated[float, typer.Option(help="Each GPU's bf16 matmul floor.")] = 1.0,
    gpu_memory_mb: Annotated[int, typer.Option(help="Memory each GPU must give.")] = 1024,
    min_nccl_gbps: Annotated[float, typer.Option(
        help="Bus bandwidth floor of the all-reduce among the node's GPUs.")] = 1.0,
    peers: Annotated[str | None, typer.Option(
        "--peers", help="HOST:PORT of rank 0: an all-reduce between the job's nodes (every "
                        "node runs it with its --rank).")] = None,
    rank: Annotated[int | None, typer.Option(help="This node's rank (default $GROUP_RANK).")
                    ] = None,
    nodes: Annotated[int | None, typer.Option(
        help="How many nodes take part (default $GROUP_WORLD_SIZE).")] = None,
    min_peer_gbps: Annotated[float, typer.Option(
        help="Bus bandwidth floor of the all-reduce between nodes.")] = 0.05,
) -> None:
    """Check this node: CPU, memory, disks; each GPU and NCCL when CUDA is present; with
    --peers, the network to the other nodes. One line per check; exit 0 iff all pass."""
    ctx: Ctx = c.obj
    floors = Floors(min_cpu_gflops, min_memory_mb, min_free_gb, min_gpu_tflops, gpu_memory_mb)
    state = ctx.state_dir if Path(ctx.state_dir).is_dir() else None
    results: list[Result] = [node.cpu(floors), node.memory(floors)]
    results += [node.disk(name, path, floors) for name, path in node.dirs(state).items()]
    results += node.gpus(floors)
    nccl = collective.node_gpus(min_nccl_gbps)
    if nccl is not None:
        results.append(nccl)
    if peers is not None:
        env_rank, env_world = collective.environment_rank()
        results.append(collective.peers(peers, env_rank if rank is None else rank,
                                        env_world if nodes is None else nodes, min_peer_gbps))
    for r in results:
        typer.echo(r.line())
    failed = [r for r in results if not r.ok]
    raise typer.Exit(1 if failed else 0)


def register(app: typer.Typer) -> None:
    app.command("health-check")(health_check)
