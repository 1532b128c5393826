"""Fault-free overhead: the same 4-rank DDP loop bare under torchrun, then with each perdure
feature switched on, then examples/ddp_mlp itself; every figure a ratio to the bare loop
measured in the same run.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/overhead.py [--steps 400] [--reps 3]

Every variant runs under `torchrun --standalone --nproc-per-node 4` (OMP_NUM_THREADS=1), the
model and data of examples/ddp_mlp (MLP with dropout, AdamW, batch 16 per rank). Rank 0
stamps the end of every step; the figure is the mean iteration time over the steps after the
first `--warmup` (everything the loop does counts: data, update, reports, agreement, saves),
and rank 0's CPU time per step over the same steps (process_time: every thread of the
process), which a shared machine's scheduling disturbs far less than the wall clock.
Variants, each adding one feature to the one before:
- bare: dist.init_process_group + DistributedSampler/DataLoader (the plain torchrun loop);
- init: perdure.init() instead of init_process_group;
- loader: ElasticSampler + ElasticLoader instead of DistributedSampler;
- goodput: each step inside goodput.step (reports to a file, as under perdure);
- vote: the preemption agreement as the example makes it, `StopVote(within=0.5)` (an
  overlapped all-reduce every N steps, N steps ~ 0.5 s);
- vote-each-step: the same, voting at every step (`StopVote()`);
- vote-blocking: the same agreement as a blocking all-reduce per step (what the example did);
- ckpt: an async perdure Checkpointer save every `--every` steps (model, optimizer, loader);
- maybe-save: init, loader and goodput, and `maybe_save` every step (its policy saving every
  `--every` steps; it also agrees on preemption notices); maybe-save-unseeded: the same with
  the loader's per-batch seeding switched off (attribution only: not exact replay);
- example-no-ckpt: examples/ddp_mlp/train.py without a checkpoint directory (no saves);
- example: examples/ddp_mlp/train.py as users copy it (ledger and RNG in the checkpoint).
`NAME@before` runs variant NAME on other perdure sources (`--before-src DIR`, e.g. an older
commit's `src` from `git archive`), so a change is measured before and after in one run.
`--hidden` sets the MLP's width (the bench variants').
Runs are interleaved (variant order shuffled per repetition, seeded) so drift in the machine's
load spreads over all of them; the spread over repetitions is printed. Rank 0 also reports its
main thread's CPU per step by region (data, compute, vote, save; thread_time) and the CPU of
its other threads (gloo's, the checkpoint writer's).
The data path alone (per batch, and in instructions): bench/loader.py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_mlp"
REPLICAS, SAMPLES, BATCH = 4, 4000, 16
FEATURES = ("init", "loader", "goodput", "vote", "ckpt")
VARIANTS: dict[str, list[str]] = {
    "bare": [],
    "init": ["init"],
    "loader": ["init", "loader"],
    "goodput": ["init", "loader", "goodput"],
    "vote": ["init", "loader", "goodput", "vote"],
    "vote-each-step": ["init", "loader", "goodput", "vote-each-step"],
    "vote-blocking": ["init", "loader", "goodput", "vote-blocking"],
    "ckpt": ["init", "loader", "goodput", "vote", "ckpt"],
    # The loop a script without preemption code has: maybe_save every step, its policy saving
    # every --every steps (it also agrees on preemption notices).
    "maybe-save": ["init", "loader", "goodput", "maybe-save"],
    # Attribution only, not a product setting: maybe-save with the loader's per-batch seeding
    # (capture, seed, restore of the CPU generators) switched off.
    "maybe-save-unseeded": ["init", "loader", "goodput", "maybe-save", "unseeded"],
}
EXAMPLES = ("example-no-ckpt", "example")
# examples/gpt (~14 M parameters, sequence 256, FSDP2 on gloo): bare (no perdure at all) and
# with everything on (perdure.init, elastic sampler over the cached shards, goodput, stop vote,
# async saves every --gpt-every steps).
GPT = ROOT / "examples" / "gpt" / "train.py"
GPT_VARIANTS = ("gpt-bare", "gpt")
# "<variant>@before": the variant run on other perdure sources (--before-src), interleaved
# with the rest, so a change is measured before and after in the same run.
BEFORE = "@before"


# ---- the worker (runs under torchrun) -----------------------------------------------------

class _Regions:
    """Main-thread CPU seconds spent in each part of the step, summed (time.thread_time)."""

    def __init__(self) -> None:
        self.spent = {"data": 0.0, "compute": 0.0, "vote": 0.0, "save": 0.0}
        self._at = time.thread_time()

    def mark(self, region: str) -> None:
        """The CPU time since the previous mark went to `region`."""
        now = time.thread_time()
        self.spent[region] += now - self._at
        self._at = now


def _stamp(fd: int | None, step: int, regions: _Regions | None = None) -> None:
    if fd is not None:
        line: dict[str, Any] = {"step": step, "t": time.perf_counter(),
                                "cpu": time.process_time(), "main": time.thread_time()}
        if regions is not None:
            line["regions"] = regions.spent
        os.write(fd, (json.dumps(line) + "\n").encode())


def _setup(args: argparse.Namespace, on: set[str]) -> dict[str, Any]:
    """Process group, model, optimizer, loader, vote and checkpointer of the variant."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, str(EXAMPLE))
    import train as ex

    if "init" in on:
        import perdure

        perdure.init(seed=0)
    else:
        dist.init_process_group("gloo")
        torch.manual_seed(0)
    data = ex.Samples(SAMPLES, seed=1)
    model = ex.build_model(args.hidden)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3)
    loader: Any
    if "loader" in on:
        from perdure.runtime import ElasticLoader, ElasticSampler

        if "unseeded" in on:
            from perdure.runtime.data import batching

            batching.SeededDataset.__getitems__ = (  # type: ignore[method-assign]
                lambda self, indices: self._fetch(list(indices)))
            batching.SeededDataset.fetch_ahead = (  # type: ignore[method-assign]
                lambda self, batches: [self._fetch(list(b)) for b in batches])

        loader = ElasticLoader(data, ElasticSampler(len(data), BATCH, seed=0))
    else:
        from torch.utils.data import DataLoader, DistributedSampler

        loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, seed=0))
    from perdure.runtime import Checkpointer, StopVote

    vote = StopVote(within=0.5) if "vote" in on else \
        StopVote() if "vote-each-step" in on else None
    ckpt = Checkpointer(args.ckpt, keep=2) if "ckpt" in on else None
    if "maybe-save" in on:
        from perdure.runtime import SavePolicy

        ckpt = Checkpointer(args.ckpt, keep=2, policy=SavePolicy(every_steps=args.every))
    return {"model": model, "ddp": ddp, "opt": opt, "loader": loader, "vote": vote,
            "ckpt": ckpt}


def worker(args: argparse.Namespace) -> None:
    """One variant of the loop; rank 0 appends a line per finished step to --timeline."""
    import torch
    import torch.distributed as dist
    from torch import nn

    from perdure.runtime import goodput

    on = set(args.features.split(",")) if args.features else set()
    if args.pin:  # before any thread starts: gloo's and perdure's threads inherit it
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[int(os.environ["LOCAL_RANK"]) % len(cores)]})
    v = _setup(args, on)
    ddp, opt, loader, vote, ckpt = v["ddp"], v["opt"], v["loader"], v["vote"], v["ckpt"]
    fd = os.open(args.timeline, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) \
        if dist.get_rank() == 0 else None
    step, epoch, regions = 0, 0, _Regions()
    while step < args.steps:
        (loader if "loader" in on else loader.sampler).set_epoch(epoch)
        batches = iter(loader)
        while step < args.steps:
            regions.mark("compute")
            batch = next(batches, None)
            regions.mark("data")
            if batch is None:
                break
            with goodput.step(step + 1) if "goodput" in on else _null():
                _, x, y = batch
                loss = nn.functional.mse_loss(ddp(x), y, reduction="sum") / BATCH
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                step += 1
                regions.mark("compute")
                if vote is not None:
                    vote.poll(False)
                if "vote-blocking" in on:
                    flag = torch.tensor([0])
                    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                    bool(flag.item())
                regions.mark("vote")
            if "maybe-save" in on:
                ckpt.maybe_save(step, {"model": v["model"], "optim": opt, "data": loader,
                                       "step": step})
            elif ckpt is not None and step % args.every == 0:
                ckpt.save(step, {"model": v["model"], "optim": opt, "data": loader,
                                 "step": step})
            regions.mark("save")
            _stamp(fd, step, regions)
        epoch += 1
    if ckpt is not None:
        ckpt.wait()
    if vote is not None:
        vote.close()
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ---- driving ------------------------------------------------------------------------------

def _torchrun(script: list[str], env: dict[str, str], log: Path) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           f"--nproc-per-node={env.get('BENCH_REPLICAS', REPLICAS)}", *script]
    with log.open("wb") as out:
        subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, check=True,
                       timeout=600)


def _per_step(timeline: Path, warmup: int) -> dict[str, float]:
    """Seconds per step over the steps after `warmup`: wall, rank 0's process CPU, its main
    thread's CPU, and (bench variants) the main thread's CPU by region."""
    recs = [json.loads(line) for line in timeline.read_text().splitlines() if line.strip()]
    steps = [r for r in recs if "step" in r]  # the example also marks its start-up phases
    kept = [r for r in sorted(steps, key=lambda r: r["step"]) if r["step"] > warmup]
    first, last, n = kept[0], kept[-1], len(kept) - 1
    out = {key: (last[key] - first[key]) / n for key in ("t", "cpu", "main")}
    for region, spent in last.get("regions", {}).items():
        out[region] = (spent - first["regions"][region]) / n
    return out


def run_variant(name: str, root: Path, args: argparse.Namespace) -> dict[str, float]:
    d = Path(tempfile.mkdtemp(prefix=f"{name.replace('@', '-')}-", dir=root))
    timeline = d / "timeline.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PERDURE_REPORT_DIR": str(d / "reports"),
           "BENCH_REPLICAS": str(args.replicas)}
    if name.endswith(BEFORE):  # the same variant on the sources of --before-src
        if not args.before_src:
            raise SystemExit(f"variant {name}: give --before-src (a checkout's src directory)")
        env["PYTHONPATH"] = str(Path(args.before_src).absolute())
        name = name.removesuffix(BEFORE)
    (d / "reports").mkdir()
    if name in GPT_VARIANTS:
        script = [str(GPT), "--steps", str(args.gpt_steps), "--timeline", str(timeline),
                  "--data", str(root / "gpt-data"), "--cache", str(root / "gpt-cache"),
                  "--out", str(d), "--checkpoint-dir", str(d / "ckpt"),
                  "--checkpoint-every", str(args.gpt_every)]
        if name == "gpt-bare":
            script.append("--bare")
        _torchrun(script, env, d / "log")
        return _per_step(timeline, args.gpt_warmup)
    if name in EXAMPLES:
        epochs = -(-args.steps * BATCH * args.replicas // SAMPLES)
        script = [str(EXAMPLE / "train.py"), "--epochs", str(epochs), "--samples",
                  str(SAMPLES), "--log-every", "1000000", "--out", str(d), "--timeline",
                  str(timeline)]
        if name == "example":
            script += ["--checkpoint-dir", str(d / "ckpt"), "--checkpoint-every",
                       str(args.every)]
        _torchrun(script, env, d / "log")
        # The example's timeline stamps wall time: same figure (time between step ends).
        return _per_step(timeline, args.warmup)
    script = [str(Path(__file__)), "worker", *(["--pin"] if args.pin else []),
              "--features", ",".join(VARIANTS[name]),
              "--hidden", str(args.hidden), "--steps", str(args.steps), "--timeline",
              str(timeline), "--ckpt", str(d / "ckpt"), "--every", str(args.every)]
    _torchrun(script, env, d / "log")
    return _per_step(timeline, args.warmup)


def report(names: list[str], runs: dict[str, list[dict[str, float]]]) -> None:
    """Each variant's medians, its ratios to the bare run of the same repetition, and where
    rank 0's CPU went."""
    # Ratios per repetition (variants of one repetition ran close in time), then their median.
    print(f"\n{'':<18} {'wall: ms/step, x bare':^32} {'rank 0 CPU':^32} {'main thread CPU':^32}")
    print(f"{'variant':<18}" + f" {'ms':>7} {'x bare':>7} {'spread':>16}" * 3)
    for name in names:
        row = f"{name:<18}"
        for key in ("t", "cpu", "main"):
            series = [r[key] for r in runs[name]]
            base = runs[names[0]]
            ratios = [r[key] / b[key] for r, b in zip(runs[name], base, strict=True)]
            row += (f" {statistics.median(series) * 1000:7.2f} {statistics.median(ratios):7.3f}"
                    f" {min(ratios):7.3f} .. {max(ratios):5.3f}")
        print(row)
    regions = ("data", "compute", "vote", "save")
    print(f"\nrank 0's CPU per step, ms (median): main thread by region, and other threads "
          f"(gloo, checkpoint writer)\n{'variant':<18}" + "".join(f" {r:>8}" for r in regions)
          + f" {'other':>8}")
    for name in names:
        got = runs[name]
        cells = [f"{statistics.median(r[k] for r in got) * 1000:8.3f}" if k in got[0]
                 else f"{'-':>8}" for k in regions]
        other = statistics.median(r["cpu"] - r["main"] for r in got) * 1000
        print(f"{name:<18} {' '.join(cells)} {other:8.3f}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode")
    w = sub.add_parser("worker", help="the loop, run under torchrun")
    w.add_argument("--features", default="")
    for q in (p, w):
        q.add_argument("--pin", action="store_true",
                       help="pin rank k to core k (mod cores), its threads with it: the "
                            "scheduler's placement of the ranks no longer varies from run to run")
    w.add_argument("--timeline", required=True)
    w.add_argument("--ckpt", required=True)
    for q in (p, w):
        q.add_argument("--hidden", type=int, default=64,
                       help="the MLP's width (bench variants): sets the step time")
        q.add_argument("--steps", type=int, default=400)
        q.add_argument("--every", type=int, default=20, help="checkpoint every N steps")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--replicas", type=int, default=REPLICAS, help="ranks per run")
    p.add_argument("--gpt-steps", type=int, default=60, help="steps of the GPT variants")
    p.add_argument("--gpt-warmup", type=int, default=10)
    p.add_argument("--gpt-every", type=int, default=50, help="GPT checkpoint interval")
    p.add_argument("--warmup", type=int, default=30, help="steps not counted")
    p.add_argument("--variants", default=",".join([*VARIANTS, *EXAMPLES]),
                   help=f"comma-separated; NAME{BEFORE} runs NAME on --before-src")
    p.add_argument("--before-src", help="perdure sources (a src directory) for NAME@before")
    args = p.parse_args(argv)
    if args.mode == "worker":
        worker(args)
        return
    names = args.variants.split(",")
    if names[0] not in ("bare", "gpt-bare"):
        raise SystemExit("--variants must start with bare (or gpt-bare): every figure is a "
                         "ratio to it")
    print(f"$ {' '.join(sys.argv)}  (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})",
          flush=True)
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-overhead-"))
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for rep in range(args.reps):
        order = list(names)
        random.Random(rep).shuffle(order)  # no variant always follows the same one
        for name in order:
            got = run_variant(name, root, args)
            runs[name].append(got)
            print(f"  rep {rep + 1} {name:<18} {got['t'] * 1000:7.2f} ms/step, CPU "
                  f"{got['cpu'] * 1000:6.2f} ms, main thread {got['main'] * 1000:6.2f} ms "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    report(names, runs)
    print(f"runs under {root}")


if __name__ == "__main__":
    main()
