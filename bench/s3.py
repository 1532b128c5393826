"""Checkpoints on S3: perdure against raw s3fs and stock DCP, side by side, on one S3 server.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/s3.py [--mb 256] [--reps 3]

The server is moto's (the tests' `.venv-moto`, `make moto-venv`) on 127.0.0.1; staging goes
to /dev/shm so that the figures are about S3, not this machine's disk. One process, one rank.
Every ratio compares figures measured in the same run, interleaved rep by rep:
- persist throughput: perdure's save (upload in parallel parts, then confirming every object
  on the server, then the commit marker) against s3fs's own `put_file` of the same bytes (a
  copy of the shard perdure wrote). Goal >= 0.9;
- restore throughput: perdure's restore into the model against a raw parallel ranged `get` of
  the same objects into memory (s3fs `cat_ranges`, the same part size and concurrency).
  Goal >= 0.9;
- training blocked per save: perdure's async save against stock torch.distributed.checkpoint
  with its fsspec writer to the same bucket (`save`, and `async_save` in a thread), and the
  floor: a copy of the same bytes into pre-touched memory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.helpers.s3server

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from tests.helpers.s3server import MotoServer, make_bucket  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter  # noqa: E402

from perdure.runtime.checkpoint import Checkpointer  # noqa: E402
from perdure.runtime.s3.client import S3Client  # noqa: E402


def build(mb: int) -> dict[str, Any]:
    """A model of `mb` MiB of fp32 weights (layers of 16 MiB) and its step."""
    torch.manual_seed(0)
    width = 2048
    layers = max(1, (mb << 20) // (width * width * 4))
    model = nn.Sequential(*(nn.Linear(width, width, bias=False) for _ in range(layers)))
    return {"model": model, "step": 0}


def nbytes(state: dict[str, Any]) -> int:
    return sum(p.numel() * p.element_size() for p in state["model"].parameters())


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def perdure_save(ckpt: Checkpointer, state: dict[str, Any], step: int) -> tuple[float, float]:
    """(blocked seconds, persist seconds) of one async save."""
    start = time.perf_counter()
    ckpt.save(step, state)
    blocked = time.perf_counter() - start
    ckpt.wait()
    assert ckpt.last_save is not None
    return blocked, ckpt.last_save.persist_s


def raw_put(client: S3Client, local: Path, path: str) -> float:
    start = time.perf_counter()
    client.fs.put_file(str(local), path)
    return time.perf_counter() - start


def perdure_restore(ckpt: Checkpointer, fresh: dict[str, Any]) -> float:
    start = time.perf_counter()
    step = ckpt.restore_latest(fresh)
    assert step is not None
    return time.perf_counter() - start


def raw_get(client: S3Client, path: str, size: int) -> float:
    part = client.part_bytes
    starts = list(range(0, size, part))
    start = time.perf_counter()
    for i in range(0, len(starts), client.concurrency):  # `concurrency` parts in flight
        batch = starts[i : i + client.concurrency]
        client.fs.cat_ranges([path] * len(batch), batch, [min(s + part, size) for s in batch])
    return time.perf_counter() - start


def dcp_blocked(url: str, state: dict[str, Any], asynchronous: bool) -> float:
    sd = {"model": state["model"].state_dict()}
    writer = FsspecWriter(f"{url}/{uuid.uuid4().hex[:8]}", single_file_per_rank=True)
    start = time.perf_counter()
    if asynchronous:
        future = dcp.async_save(sd, storage_writer=writer, no_dist=True)
        blocked = time.perf_counter() - start
        future.result()
        return blocked
    dcp.save(sd, storage_writer=writer, no_dist=True)
    return time.perf_counter() - start


def memcpy_floor(state: dict[str, Any]) -> float:
    params = list(state["model"].parameters())
    dst = [torch.empty_like(p).zero_() for p in params]
    start = time.perf_counter()
    for d, p in zip(dst, params, strict=True):
        d.copy_(p.detach())
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=256, help="model size in MiB of fp32")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perdure-bench-s3-"))
    server = MotoServer(work / "moto.log")
    server.start()
    os.environ.update(AWS_ENDPOINT_URL=server.endpoint, AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench-secret", AWS_DEFAULT_REGION="us-east-1",
                      PERDURE_STAGING_DIR="/dev/shm")
    try:
        make_bucket(server.endpoint, "bench")
        run(args, work)
    finally:
        server.kill()
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> None:
    state = build(args.mb)
    size = nbytes(state)
    client = S3Client()
    print(f"state {size / 2**20:.0f} MiB fp32; parts of {client.part_bytes >> 20} MiB, "
          f"{client.concurrency} in flight; moto on {os.environ['AWS_ENDPOINT_URL']}")
    fig: dict[str, list[float]] = {k: [] for k in (
        "blocked", "persist", "put", "restore", "get", "dcp", "dcp_async", "floor")}
    url = "s3://bench/perdure"
    ckpt = Checkpointer(url, keep=1)  # one per job, as in training: warmed by a first save
    perdure_save(ckpt, state, 1)
    fresh = build(args.mb)
    perdure_restore(ckpt, fresh)
    shard_bytes = 0
    for rep in range(args.reps):
        step = rep + 2
        blocked, persist = perdure_save(ckpt, state, step)
        shard = f"bench/perdure/step-{step:08d}/__0_0.distcp"
        local = Path("/dev/shm") / f"perdure-bench-{uuid.uuid4().hex}"
        client.fs.get_file(shard, str(local))
        shard_bytes = local.stat().st_size
        fig["put"].append(raw_put(client, local, f"bench/raw-{rep}/shard"))
        local.unlink()
        fig["blocked"].append(blocked)
        fig["persist"].append(persist)
        fig["restore"].append(perdure_restore(ckpt, fresh))
        fig["get"].append(raw_get(client, shard, shard_bytes))
        fig["dcp"].append(dcp_blocked(f"s3://bench/dcp-{rep}", state, asynchronous=False))
        fig["dcp_async"].append(dcp_blocked(f"s3://bench/dcpa-{rep}", state, asynchronous=True))
        fig["floor"].append(memcpy_floor(state))
        client.remove(f"bench/raw-{rep}")
        print(f"rep {rep + 1}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in fig.items()),
              flush=True)
    ckpt.close()
    m = {k: median(v) for k, v in fig.items()}
    mbps = shard_bytes / 2**20
    print(f"\nmedians over {args.reps} reps ({mbps:.0f} MiB shard):")
    print(f"  persist   perdure {mbps / m['persist']:7.1f} MiB/s   raw s3fs put "
          f"{mbps / m['put']:7.1f} MiB/s   ratio {m['put'] / m['persist']:.2f} (goal >= 0.9)")
    print(f"  restore   perdure {mbps / m['restore']:7.1f} MiB/s   raw parallel get "
          f"{mbps / m['get']:7.1f} MiB/s   ratio {m['get'] / m['restore']:.2f} (goal >= 0.9)")
    print(f"  blocked   perdure {m['blocked']:.3f}s   DCP+fsspec save {m['dcp']:.3f}s "
          f"(x{m['dcp'] / m['blocked']:.1f})   DCP async_save {m['dcp_async']:.3f}s "
          f"(x{m['dcp_async'] / m['blocked']:.1f})   memcpy floor {m['floor']:.3f}s")


if __name__ == "__main__":
    main()
