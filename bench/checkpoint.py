"""Checkpoint benchmark: 2 ranks on gloo, DDP model + Adam state of about 1 GiB of fp32.

    flock /tmp/perdure-bench.lock .venv/bin/python bench/checkpoint.py [--gib 1.0] \
        [--dir /tmp] [--reps 5] [--steps 3] [--workload mlp|gpt]

`--workload gpt` measures examples/gpt instead (~14 M parameters, sequence 256, AdamW,
FSDP2 over the 2 ranks: each rank holds and writes its own shard; --gib does not apply); the
torch.save baseline is then each rank saving its own shards.

Every figure comes with a baseline measured in the same run, on the same directory (a disk
directory by default; pass --dir /dev/shm to measure memory instead):
- time training is blocked per save: torch.save of rank 0's state dict (DDP: rank 0 holds
  it all), DCP save, stock DCP async_save (thread mode, own gloo group), perdure's async save
  (thread and process persist; deferred staging, so the wait of the optimizer's next step
  for the background copy counts as blocked too; and stage="sync"), against the floor: a
  plain copy of the same bytes into pre-touched memory;
- the checksum's cost: CRC-32C over the bytes a rank writes, against a memcpy of them and
  against writing them;
- perdure's persist throughput against write + fsync of the same bytes (both ranks at once),
  and restore throughput (into a new model, as recovery does) against a read of the same
  files (both cold: their pages are dropped first);
- training step time while a background persist runs, against step time with none.
Each baseline is measured right before the figure it is compared with, so that load from
other processes on a shared machine hits both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.distributed as dist
from pagecache import drop_cache
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.nn.parallel import DistributedDataParallel as DDP

from perdure.runtime.checkpoint import Checkpointer, checksum

WORLD = 2
MODES = ("thread", "process")
READ_PAIRS = 3


def files_under(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


def build(gib: float, workload: str = "mlp") -> tuple[nn.Module, torch.optim.Optimizer, int]:
    """A DDP MLP whose parameters + Adam state are about ``gib`` GiB of fp32, and its width;
    or (workload "gpt") examples/gpt sharded by FSDP2 with AdamW, and 0."""
    if workload == "gpt":
        return build_gpt()
    layers = 5
    hidden = int(((gib * 2**30) / (12 * layers)) ** 0.5)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(*[nn.Linear(hidden, hidden) for _ in range(layers)]))
    optim = torch.optim.Adam(model.parameters(), lr=1e-4)
    return model, optim, hidden


def build_gpt() -> tuple[nn.Module, torch.optim.Optimizer, int]:
    from recovery_gpt import load_example
    from torch.distributed.fsdp import fully_shard

    gpt = load_example("model")
    torch.manual_seed(0)
    model = gpt.GPT(gpt.GPTConfig())
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    optim = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    return model, optim, 0


def train_step(model: nn.Module, optim: torch.optim.Optimizer, hidden: int) -> float:
    """One step: the MLP on a random batch, or (hidden 0) the GPT on random tokens."""
    start = time.perf_counter()
    if hidden:
        loss = model(torch.randn(8, hidden)).pow(2).mean()
    else:
        config: Any = model.config
        tokens = torch.randint(0, config.vocab, (4, config.seq + 1))
        loss = model(tokens[:, :-1], tokens[:, 1:])
    optim.zero_grad()
    loss.backward()
    optim.step()
    return time.perf_counter() - start


def state_tensors(model: nn.Module, optim: torch.optim.Optimizer) -> list[torch.Tensor]:
    params = [local(p.detach()) for p in model.parameters()]
    return params + [local(t) for s in optim.state.values() for t in s.values() if t.dim() > 0]


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a tensor (an FSDP2 DTensor's local shard)."""
    to_local = getattr(t, "to_local", None)
    return to_local() if to_local is not None else t


T0 = time.perf_counter()


def phase(name: str) -> None:
    """Progress on stderr (rank 0), so a slow phase is visible while it runs."""
    if os.environ.get("RANK") == "0":
        print(f"[{time.perf_counter() - T0:7.1f}s] {name}", file=sys.stderr, flush=True)


def timed(fn: Any) -> float:
    dist.barrier()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_floor(tensors: list[torch.Tensor], reps: int) -> float:
    """Copy every state tensor into pre-touched buffers (both ranks at once); best of reps."""
    buffers = [torch.empty_like(t).zero_() for t in tensors]

    def copy() -> None:
        for b, t in zip(buffers, tensors, strict=True):
            b.copy_(t)

    return min(timed(copy) for _ in range(reps))


def measure_checksum(tensors: list[torch.Tensor], reps: int) -> float:
    """CRC-32C (what the writer computes) over ``tensors``' bytes (both ranks at once)."""
    views = [t.reshape(-1).view(torch.uint8).numpy() for t in tensors]

    def crc() -> None:
        for v in views:
            checksum.update(checksum.ALGORITHM, 0, v.data)

    return min(timed(crc) for _ in range(reps))


def measure_baselines(root: Path, model: nn.Module, optim: torch.optim.Optimizer,
                      pg: Any, rank: int) -> dict[str, Any]:
    """Blocked time of torch.save (rank 0; FSDP: every rank its shards), DCP save and stock
    DCP async_save."""
    out: dict[str, Any] = {}
    inner = getattr(model, "module", None)
    sharded = inner is None  # FSDP2: each rank holds its own shard of everything
    if sharded:
        sd = {k: local(v) for k, v in model.state_dict().items()}
        osd = {k: {n: local(t) for n, t in v.items()} for k, v in optim.state.items()}
    else:
        assert isinstance(inner, nn.Module)
        sd, osd = inner.state_dict(), optim.state_dict()
    path = root / f"torch-save-{rank}.pt"

    def save_on_rank0() -> None:
        if rank == 0 or sharded:
            torch.save({"m": sd, "o": osd}, path)

    out["torch_save_s"] = timed(save_on_rank0)
    dist.barrier()
    path.unlink(missing_ok=True)
    state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, optim)}
    phase("dcp save")
    out["dcp_save_s"] = timed(lambda: dcp_save(state, checkpoint_id=str(root / "dcp"),
                                               process_group=pg))
    dist.barrier()
    phase("dcp async_save")
    async_blocked, async_total = [], []
    for i in range(2):
        target = root / f"dcp-async-{i}"
        dist.barrier()
        start = time.perf_counter()
        future: Any = dcp_async_save(state, checkpoint_id=str(target), process_group=pg)
        async_blocked.append(time.perf_counter() - start)
        future.result()
        async_total.append(time.perf_counter() - start)
    out["dcp_async_blocked_s"] = async_blocked
    out["dcp_async_total_s"] = async_total
    dist.barrier()
    if rank == 0:
        for name in ("dcp", "dcp-async-0", "dcp-async-1"):
            shutil.rmtree(root / name, ignore_errors=True)
    return out


def read_cold(files: list[Path]) -> float:
    """Seconds for this rank to read ``files`` after evicting them (both ranks at once)."""
    dist.barrier()
    drop_cache(files)
    buf = bytearray(64 << 20)

    def read() -> None:
        for path in files:
            with open(path, "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass

    return timed(read)


def read_cold_fresh(files: list[Path]) -> float:
    """Like read_cold, but each file is read into newly allocated memory, as a restore into a
    new model must (its optimizer state has no memory yet): the page faults count too."""
    dist.barrier()
    drop_cache(files)

    def read() -> None:
        for path in files:
            size = path.stat().st_size
            view = torch.empty(size, dtype=torch.uint8).numpy().data.cast("B")
            with open(path, "rb", buffering=0) as f:
                done = 0
                while done < size:
                    done += f.readinto(view[done:])

    return timed(read)


def perdure_save(ckpt: Checkpointer, state: dict[str, Any], step: int, train: Any) -> Any:
    """One save; ``train(inflight)`` runs while it persists. Returns the save's stats."""
    dist.barrier()
    state["step"] = step
    ckpt.save(step, state)
    train(ckpt._runner.inflight)
    ckpt.wait()
    dist.barrier()  # rank 0's retention (after the commit) is done too
    stats = ckpt.last_save
    assert stats is not None
    extra = " ".join(f"{k} {v:.2f}" for k, v in stats.extra.items())
    phase(f"save {step}: blocked {stats.blocked_s:.3f}s, persist {stats.persist_s:.2f}s ({extra})")
    return stats


def no_training(inflight: Any) -> None:
    return None


def write_raw(path: Path, nbytes: int) -> float:
    """write + fsync ``nbytes`` (both ranks at once); the file is removed afterwards."""
    chunk = bytes(range(256)) * (1 << 18)  # 64 MiB

    def write() -> None:
        with open(path, "wb") as f:
            left = nbytes
            while left > 0:
                left -= f.write(chunk[: min(left, len(chunk))])
            f.flush()
            os.fsync(f.fileno())

    took = timed(write)
    path.unlink()
    return took


def measure_perdure(root: Path, model: nn.Module, optim: torch.optim.Optimizer, hidden: int,
                    persist: str, args: argparse.Namespace) -> dict[str, Any]:
    """Each figure next to its baseline, measured right before it (the machine is shared)."""
    rank = dist.get_rank()
    directory = root / f"perdure-{persist}"
    ckpt = Checkpointer(directory, keep=1, persist=persist)
    state: dict[str, Any] = {"model": model, "optim": optim}
    out: dict[str, Any] = {"first": perdure_save(ckpt, state, 0, no_training).blocked_s}
    # The floor for what this rank stages: a copy of exactly those bytes, warm.
    assert ckpt._buffers is not None
    staged = list(ckpt._buffers.tensors.values())
    out["share_floor_s"] = measure_floor(staged, args.reps)
    out["share_bytes"] = sum(t.numel() * t.element_size() for t in staged)
    out["crc_s"] = measure_checksum(staged, args.reps)
    step = 0
    out["pairs_write"] = []  # (write + fsync s, persist s, blocked s, committed s), idle
    nbytes = ckpt.last_save.bytes_written if ckpt.last_save else 0
    for rep in range(args.reps):  # alternate which goes first, so that drift cancels
        raw = write_raw(root / f"raw-{rank}.bin", nbytes) if rep % 2 == 0 else 0.0
        step += 1
        stats = perdure_save(ckpt, state, step, no_training)
        raw = raw or write_raw(root / f"raw-{rank}.bin", nbytes)
        out["pairs_write"].append((raw, stats.persist_s, stats.blocked_s,
                                   stats.extra.get("committed_s", 0.0)))
    out["steps_idle_s"], out["steps_during_s"] = [], []

    def train(inflight: Any) -> None:
        for _ in range(args.steps):  # every rank runs the same number of DDP steps
            overlapped = inflight is not None and not inflight.done
            took = train_step(model, optim, hidden)
            if overlapped:
                out["steps_during_s"].append(took)

    out["blocked_training_s"] = []  # per save followed by training: (blocked s, of it step wait s)
    for _ in range(args.reps):
        out["steps_idle_s"] += [train_step(model, optim, hidden) for _ in range(args.steps)]
        step += 1
        stats = perdure_save(ckpt, state, step, train)
        out["blocked_training_s"].append((stats.blocked_s, stats.extra.get("step_wait_s", 0.0)))
    files = files_under(directory)
    out["on_disk"] = sum(p.stat().st_size for p in files)
    ckpt.close()
    if persist == "thread":
        out["sync_blocked_s"] = measure_sync(root, state, args.reps)
    out["pairs_read"] = []  # (raw cold read s, cold restore s, cold read into new memory s)
    for _ in range(READ_PAIRS):
        raw = read_cold(files)
        fresh_read = read_cold_fresh(files)
        # Restore as recovery does: into a new model and an optimizer without state.
        fresh, fresh_optim, _ = build(args.gib, args.workload)
        target = {"model": fresh, "optim": fresh_optim, "step": -1}
        dist.barrier()
        drop_cache(files)
        phase(f"perdure {persist}: restore")
        took = timed(lambda t=target: Checkpointer(directory).restore_latest(t))
        assert target["step"] == step
        out["pairs_read"].append((raw, took, fresh_read))
    dist.barrier()
    return out


def measure_sync(root: Path, state: dict[str, Any], reps: int) -> list[float]:
    """Blocked time of saves that copy everything before returning (stage="sync")."""
    ckpt = Checkpointer(root / "perdure-sync", keep=1, stage="sync")
    perdure_save(ckpt, state, 0, no_training)
    blocked = [perdure_save(ckpt, state, i, no_training).blocked_s for i in range(1, reps + 1)]
    ckpt.close()
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(root / "perdure-sync", ignore_errors=True)
    return blocked


def worker(args: argparse.Namespace) -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method=f"file://{args.store}", rank=rank,
                            world_size=WORLD)
    root = Path(args.root)
    model, optim, hidden = build(args.gib, args.workload)
    train_step(model, optim, hidden)
    tensors = state_tensors(model, optim)
    total = sum(t.numel() * t.element_size() for t in tensors)
    result: dict[str, Any] = {"rank": rank, "state_bytes": total, "hidden": hidden}
    phase("floor")
    result["floor_s"] = measure_floor(tensors, args.reps)
    pg = dist.new_group(backend="gloo")
    phase("baselines")
    result.update(measure_baselines(root, model, optim, pg, rank))
    for persist in MODES:
        phase(f"perdure {persist}")
        result[persist] = measure_perdure(root, model, optim, hidden, persist, args)
    gathered: list[Any] = [None] * WORLD
    dist.all_gather_object(gathered, result)
    if rank == 0:
        Path(args.out).write_text(json.dumps(gathered))
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def describe(rank0: dict[str, Any]) -> str:
    if rank0["hidden"]:
        return f"DDP MLP {rank0['hidden']} wide x5 + Adam"
    return "examples/gpt, FSDP2 over 2 ranks + AdamW"


def med(values: list[float]) -> float:
    return statistics.median(values)


def report(ranks: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The results as markdown tables, every figure against its baseline."""
    total = ranks[0]["state_bytes"]
    def slowest(get: Callable[[dict[str, Any]], float]) -> float:
        return max(get(r) for r in ranks)  # the slowest rank decides

    def worst(mode: str, key: str, i: int, j: int) -> float:
        return max(float(r[mode][key][i][j]) for r in ranks)

    def first(mode: str) -> float:
        return max(float(r[mode]["first"]) for r in ranks)
    floor = slowest(lambda r: r["floor_s"])
    where = "tmpfs" if args.dir.startswith("/dev/shm") else "disk"
    lines = [
        f"State: {total / 2**30:.2f} GiB ({describe(ranks[0])}), "
        f"2 ranks, gloo, target {args.dir} ({where}); {args.reps} reps, medians.",
        "",
        "| time training is blocked per save | seconds | x memcpy floor |",
        "| --- | ---: | ---: |",
        f"| floor: memcpy of the whole state into pre-touched memory | {floor:.3f} | 1.00 |",
    ]
    rows = [
        ("torch.save of rank 0's state dict" if ranks[0]["hidden"] else
         "torch.save of each rank's shards", slowest(lambda r: r["torch_save_s"])),
        ("DCP save", slowest(lambda r: r["dcp_save_s"])),
        ("DCP async_save (stock), 1st", slowest(lambda r: r["dcp_async_blocked_s"][0])),
        ("DCP async_save (stock), 2nd", slowest(lambda r: r["dcp_async_blocked_s"][1])),
    ]
    for mode in MODES:
        rows.append((f"perdure async ({mode}), 1st save (plans, allocates)",
                     first(mode)))
        rows.append((f"perdure async ({mode}), later saves, followed by training",
                     blocked_with_training(ranks, mode)[0]))
    sync = med([max(float(r["thread"]["sync_blocked_s"][i]) for r in ranks)
                for i in range(args.reps)])
    rows.append(("perdure async (thread), stage='sync', later saves", sync))
    lines += [f"| {name} | {s:.3f} | {s / floor:.2f} |" for name, s in rows]
    lines += ["", share_lines(ranks, args)]
    lines += ["", "| throughput (2 ranks at once) | GB/s | baseline GB/s | fraction |",
              "| --- | ---: | ---: | ---: |"]
    for mode in MODES:
        on_disk = ranks[0][mode]["on_disk"]
        raw_bw, bw, cycle_bw = [], [], []
        for i in range(args.reps):
            raw_bw.append(on_disk / worst(mode, "pairs_write", i, 0))
            bw.append(on_disk / worst(mode, "pairs_write", i, 3))
            cycle_bw.append(on_disk / worst(mode, "pairs_write", i, 1))
        frac = med([b / a for a, b in zip(raw_bw, bw, strict=True)])
        cycle = med([b / a for a, b in zip(raw_bw, cycle_bw, strict=True)])
        lines.append(f"| perdure ({mode}) persist, until committed, vs write + fsync of the same "
                     f"bytes | {med(bw) / 1e9:.3f} | {med(raw_bw) / 1e9:.3f} | {frac:.2f} |")
        lines.append(f"| perdure ({mode}) persist + retention (deletes the previous checkpoint) "
                     f"| {med(cycle_bw) / 1e9:.3f} | {med(raw_bw) / 1e9:.3f} | {cycle:.2f} |")
        read_bw, restore_bw, fresh_bw = [], [], []
        for i in range(READ_PAIRS):
            read_bw.append(on_disk * WORLD / worst(mode, "pairs_read", i, 0))
            restore_bw.append(on_disk * WORLD / worst(mode, "pairs_read", i, 1))
            fresh_bw.append(on_disk * WORLD / worst(mode, "pairs_read", i, 2))
        frac = med([b / a for a, b in zip(read_bw, restore_bw, strict=True)])
        lines.append(f"| perdure restore (into a new model) vs cold read of the same files | "
                     f"{med(restore_bw) / 1e9:.3f} | {med(read_bw) / 1e9:.3f} | {frac:.2f} |")
        frac = med([b / a for a, b in zip(fresh_bw, restore_bw, strict=True)])
        lines.append(f"| the same restore vs cold read of the same files into new memory | "
                     f"{med(restore_bw) / 1e9:.3f} | {med(fresh_bw) / 1e9:.3f} | {frac:.2f} |")
    lines += ["", f"| training step ({'DDP' if ranks[0]['hidden'] else 'FSDP2'}, 2 ranks) "
              "| median s | x no persist |",
              "| --- | ---: | ---: |"]
    for mode in MODES:
        idle = med([s for r in ranks for s in r[mode]["steps_idle_s"]])
        during = [s for r in ranks for s in r[mode]["steps_during_s"]]
        lines.append(f"| no persist running (next to {mode}) | {idle:.3f} | 1.00 |")
        if during:
            lines.append(f"| while perdure ({mode}) persists ({len(during)} steps) | "
                         f"{med(during):.3f} | {med(during) / idle:.2f} |")
    return "\n".join(lines)


def summary(ranks: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """Per save and restore, the slowest rank's seconds (perdure sim calibrate reads these)."""
    def worst(key: str, i: int, j: int) -> float:
        return max(float(r[mode][key][i][j]) for r in ranks)

    n_write = len(ranks[0][mode]["pairs_write"])
    model = {} if ranks[0]["hidden"] else {"model": "examples/gpt"}  # calibrate names it
    return {**model, "mode": mode, "state_bytes": ranks[0]["state_bytes"],
            "save_blocking_s": blocked_with_training(ranks, mode)[0],
            "persist_s": med([worst("pairs_write", i, 3) for i in range(n_write)]),
            "restore_s": med([worst("pairs_read", i, 1) for i in range(READ_PAIRS)])}


def blocked_with_training(ranks: list[dict[str, Any]], mode: str) -> tuple[float, float]:
    """Median over saves of the slowest rank's blocked time (save() plus the optimizer's wait
    for the deferred copies), and of that wait alone."""
    n = len(ranks[0][mode]["blocked_training_s"])
    blocked = [max(float(r[mode]["blocked_training_s"][i][0]) for r in ranks) for i in range(n)]
    waits = [max(float(r[mode]["blocked_training_s"][i][1]) for r in ranks) for i in range(n)]
    return med(blocked), med(waits)


def share_lines(ranks: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Blocked time and checksum cost against a memcpy of exactly the bytes a rank stages."""
    share = max(float(r["thread"]["share_floor_s"]) for r in ranks)
    crc = max(float(r["thread"]["crc_s"]) for r in ranks)
    nbytes = ranks[0]["thread"]["share_bytes"]
    raw = med([max(float(r["thread"]["pairs_write"][i][0]) for r in ranks)
               for i in range(args.reps)])
    why = "DDP replicas are written once" if ranks[0]["hidden"] else "its FSDP2 shard"
    out = [f"Each rank stages only the {nbytes / 2**30:.2f} GiB its plan assigns it ({why}). "
           f"A memcpy of exactly those bytes takes {share:.3f} s."]
    for mode in MODES:
        blocked, wait = blocked_with_training(ranks, mode)
        out.append(f"perdure's later saves ({mode}) block {blocked / share:.2f}x that "
                   f"({blocked:.3f} s, of which {wait:.3f} s the optimizer's wait for the "
                   "deferred copies).")
    out.append(f"The checksum ({checksum.ALGORITHM}) of those bytes, computed by the writer "
               f"while it writes: {crc:.3f} s = {crc / share:.2f}x the memcpy, "
               f"{crc / raw:.3f}x the write + fsync of the same bytes ({raw:.3f} s).")
    return " ".join(out)


def load_average() -> str:
    """The 1-minute load average: the machine is shared, and this says how much."""
    return Path("/proc/loadavg").read_text().split()[0]


def launch(args: argparse.Namespace) -> None:
    before = load_average()
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-ckpt-", dir=args.dir))
    out = root / "result.json"
    procs = []
    for rank in range(WORLD):
        env = dict(os.environ, RANK=str(rank), OMP_NUM_THREADS="1")
        cmd = [sys.executable, __file__, "--worker", "--root", str(root), "--store",
               str(root / "store"), "--out", str(out), "--gib", str(args.gib),
               "--reps", str(args.reps), "--steps", str(args.steps), "--workload",
               args.workload]
        procs.append(subprocess.Popen(cmd, env=env))
    codes = [p.wait() for p in procs]
    try:
        if any(codes):
            raise SystemExit(f"a rank failed: exit codes {codes}")
        ranks = json.loads(out.read_text())
        print(report(ranks, args))
        if args.json:
            Path(args.json).write_text(json.dumps(summary(ranks, MODES[0]), indent=1))
        print(f"\nLoad average (1 min) at the start / end: {before} / {load_average()}.")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", help="also write the per-save figures to this file")
    parser.add_argument("--workload", choices=("mlp", "gpt"), default="mlp",
                        help="mlp: a DDP MLP of --gib; gpt: examples/gpt under FSDP2")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        launch(args)


if __name__ == "__main__":
    main()
