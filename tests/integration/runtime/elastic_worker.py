"""One replica of an elastic DDP job (gloo), for the elastic integration tests and bench.

    python elastic_worker.py '{"steps": 200, "out": "/tmp/x", ...}'

The environment is what perdure gives an elastic replica (PERDURE_RDZV_DIR, PERDURE_REPLICA,
...); the test plays the controller. Every completed step is a JSON line in
`<out>/<replica>-<pid>.jsonl`: the step, the sampler position (epoch, global cursor), world
size, rank, round, this rank's sample indices and the loss; plus `enter` lines (each entry of
the loop: how the state was restored), `event` lines, and a final `done` line with a checksum
of the weights and the loss on the whole data set.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from perdure.runtime import Snapshotter, elastic
from perdure.runtime.checkpoint import RankLocal
from perdure.runtime.data import ElasticSampler
from perdure.runtime.elastic import ElasticEvent

EXIT_TIMEOUT = 3
EXIT_LOST = 4


class Log:
    def __init__(self, out: Path, replica: str) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.file = (out / f"{replica}-{os.getpid()}.jsonl").open("a", buffering=1)

    def write(self, **record: Any) -> None:
        self.file.write(json.dumps({"t": time.time(), "pid": os.getpid(), **record}) + "\n")


def make_data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, 16, generator=g)
    w = torch.randn(16, 1, generator=g)
    return x, x @ w + 0.1 * torch.randn(n, 1, generator=g)


def checksum(model: nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def main() -> None:
    args: dict[str, Any] = json.loads(sys.argv[1])
    manager = elastic.Manager()
    log = Log(Path(args["out"]), manager.replica)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.get("lr", 0.01), momentum=0.9)
    x, y = make_data(args.get("samples", 240))
    batch = args.get("batch", 4)
    sampler = ElasticSampler(len(x), batch, seed=7)
    state: dict[str, Any] = {"model": model, "optim": opt, "step": 0,
                             "data": sampler.state_dict(),
                             # per rank: snapshotted, never broadcast by sync_state
                             "who": RankLocal({"replica": manager.replica})}
    if args.get("extra_mb"):  # a bigger state, so that a snapshot takes a while to replicate
        state["extra"] = torch.zeros(args["extra_mb"] * (1 << 18))
    snap = Snapshotter() if args.get("every") else None
    kwargs: dict[str, Any] = {"timeout": args.get("timeout", 60), "poll_interval": 0.02}
    if "minimum" in args:
        kwargs["minimum_replicas"] = args["minimum"]

    def on_event(e: ElasticEvent) -> None:
        log.write(ev="event", kind=e.kind, round=e.round, world=e.world_size,
                  previous=e.previous_world_size, waited=e.waited_s, reason=e.reason)

    @manager.elastic_retry(on_elastic_event=on_event, **kwargs)
    def train() -> None:
        began = time.perf_counter()
        restored, source = restore(args.get("restore", "sync"), manager, snap, state)
        sampler.load_state_dict(state["data"])  # re-partition on this group's world size
        sampler.set_world(manager.rank, manager.world_size)
        ddp = DDP(model) if manager.world_size > 1 else model
        log.write(ev="enter", round=manager.round, world=manager.world_size, rank=manager.rank,
                  step=state["step"], restored=restored, source=source,
                  seconds=time.perf_counter() - began, who=state["who"].value["replica"])
        while not finished(args, state, sampler):
            if sampler.cursor >= sampler.num_samples:
                sampler.set_epoch(sampler.epoch + 1)
            for indices in sampler:
                train_step(ddp, opt, x[indices], y[indices], batch, args, state, sampler, log,
                           manager, indices)
                save_snapshot(snap, state, args, manager, log)
                if finished(args, state, sampler):
                    return
                manager.maybe_reconfigure()

    try:
        train()
    except TimeoutError as exc:
        log.write(ev="timeout", message=str(exc))
        manager.close()
        os._exit(EXIT_TIMEOUT)
    except elastic.MembershipError as exc:
        log.write(ev="error", type=type(exc).__name__, message=str(exc))
        manager.close()
        os._exit(EXIT_LOST)
    with torch.no_grad():
        loss = float(nn.functional.mse_loss(model(x), y))
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
    log.write(ev="done", step=state["step"], checksum=checksum(model), loss=loss,
              world=manager.world_size, round=manager.round, weights=weights)
    if snap is not None:
        snap.close()
    manager.close()
    os._exit(0)


def finished(args: dict[str, Any], state: dict[str, Any], sampler: ElasticSampler) -> bool:
    """`steps` global steps done, or (with `epochs`) that many whole epochs of data."""
    if "epochs" in args:
        return sampler.epoch >= args["epochs"] - 1 and sampler.cursor >= sampler.num_samples
    return bool(state["step"] >= args["steps"])


def restore(mode: str, manager: elastic.Manager, snap: Snapshotter | None,
            state: dict[str, Any]) -> tuple[int | None, str]:
    """How the state arrives after a change: from the survivors, or from snapshots."""
    if mode == "snapshot" and snap is not None and manager.round > 0:
        info = snap.load(state)
        return (info.step, info.source) if info else (None, "none")
    step = manager.sync_state(state)
    return step, "live" if step is not None else "none"


def train_step(ddp: nn.Module, opt: torch.optim.Optimizer, xb: torch.Tensor, yb: torch.Tensor,
               batch: int, args: dict[str, Any], state: dict[str, Any],
               sampler: ElasticSampler, log: Log, manager: elastic.Manager,
               indices: list[int]) -> None:
    # sum / batch (not mean): an empty micro-batch at an epoch's end adds nothing, and DDP
    # still all-reduces, so every rank stays in step
    loss = ((ddp(xb) - yb) ** 2).sum() / batch
    opt.zero_grad()
    loss.backward()
    opt.step()
    state["step"] += 1
    state["data"] = sampler.state_dict()  # the position after the last completed step
    log.write(ev="step", step=state["step"], epoch=indices.epoch,  # type: ignore[attr-defined]
              cursor=indices.cursor, world=manager.world_size,  # type: ignore[attr-defined]
              rank=manager.rank, round=manager.round, indices=list(indices),
              loss=loss.item())
    time.sleep(args.get("step_time", 0.0))


def save_snapshot(snap: Snapshotter | None, state: dict[str, Any], args: dict[str, Any],
                  manager: elastic.Manager, log: Log) -> None:
    if snap is None or state["step"] % args["every"]:
        return
    # only the first launch dies (its replacement starts in a later round)
    dying = args.get("die_during_snapshot") == [manager.replica, state["step"]] and (
        os.environ.get("PERDURE_ROUND") == "0")
    if dying:
        snap.join()  # the previous snapshot is complete everywhere; this one will not be
    taken = snap.save(state["step"], state)
    log.write(ev="snapshot", step=state["step"], taken=taken, in_flight=snap.in_flight)
    if dying:
        log.write(ev="dying", step=state["step"], in_flight=snap.in_flight)
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
