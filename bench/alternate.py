"""The 2-replica DDP loop, bare and with perdure alternating in one run: what perdure adds.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/alternate.py [--pairs 30] [--phase 200]

bench/overhead.py runs each variant as its own torchrun job; on this shared 2-core VM the bare
loop's own speed moves 2-4x from one job to the next (where the scheduler puts two busy ranks
and their threads, and whatever else runs), so ratios of separate jobs spread 0.4-1.7 and cannot
show a 5% difference. Here ONE job of 2 ranks runs phases of `--phase` steps that alternate:
- bare: torch's DataLoader + DistributedSampler, nothing else;
- perdure: ElasticSampler + ElasticLoader, `goodput.step` around the step and
  `ckpt.maybe_save(step, state)` every step with `SavePolicy(every_steps=100)`, placed so that
  a phase of 200 steps saves twice, 50 steps before its end at the latest (the background
  persist of a save finishes inside the phase that made it).
Both phases train the same model with the same optimizer (the data differs only in order). The
job starts with `perdure.init()`, which installs handlers and adds no per-step work. Figure: each
perdure phase's wall time over the mean of the bare phases either side of it (a slow drift of
the machine cancels), median over the pairs, with its spread; rank 0's CPU the same way.

`--variants "A;B"` compares several feature lists in the same job: bare, A, bare, B, bare, A,
... each reported against the bare phases beside it, so that the variants see the same machine
(separate runs on this shared machine differ by more than the variants do). With attribution
features (ATTRIBUTION below), e.g. what CPU burned in the background costs training:

    .venv/bin/python bench/alternate.py --every 25 --variants "save;burn-idle;burn-thread"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_mlp"
SAMPLES, BATCH, EVERY = 4000, 16, 100
FEATURES = ("loader", "goodput", "save")
# For attribution only (each variant may add them):
# - "process": the saves persist in a writer process; "normal-priority": the persist thread
#   is not lowered; "no-persist": a save stages, then its persist does nothing (what the
#   training thread alone pays);
# - "burn-idle" / "burn-thread": no save, but at each save point every rank burns --burn-ms
#   of CPU in pure Python, in a helper process at SCHED_IDLE or in a nice-19 thread of its
#   own (as the persist thread runs, holding the GIL while it computes): what background CPU
#   costs training by where it runs;
# - "no-fsync": the saves' fsyncs do nothing (what the kernel's flushes cost training);
# - "one-per-next": the loader fetches one batch per next() (`read_ahead=1`), as it did before
#   it learnt to fetch small batches several at a time.
ATTRIBUTION = ("process", "normal-priority", "no-persist", "burn-idle", "burn-thread",
               "no-fsync", "one-per-next")


class Batches:
    """Endless batches from a loader, epoch after epoch (`epochs` sets each epoch)."""

    def __init__(self, loader: Any, epochs: Any) -> None:
        self.loader, self.epochs, self.epoch = loader, epochs, 0
        self.it = self._fresh()

    def _fresh(self) -> Any:
        self.epochs.set_epoch(self.epoch)
        return iter(self.loader)

    def next(self) -> Any:
        batch = next(self.it, None)
        if batch is None:
            self.epoch += 1
            self.it = self._fresh()
            batch = next(self.it)
        return batch


def burn(ms: float) -> None:
    """Spend ``ms`` of this thread's CPU in Python bytecode (which holds the GIL)."""
    until = time.thread_time() + ms / 1000
    while time.thread_time() < until:
        pass


def _burner(where: str, ms: float) -> Any:
    """A callable that makes a helper burn ``ms`` of CPU without waiting for it: a process
    at SCHED_IDLE (where="idle") or a nice-19 thread of this process ("thread")."""
    if where == "thread":
        import queue
        import threading

        from perdure.runtime.checkpoint.worker import lower_this_thread

        jobs: queue.SimpleQueue[int] = queue.SimpleQueue()

        def serve() -> None:
            lower_this_thread()
            while True:
                jobs.get()
                burn(ms)

        threading.Thread(target=serve, daemon=True).start()
        return lambda: jobs.put(1)
    read, write = os.pipe()
    if os.fork() == 0:  # ends when the rank's end closes the pipe
        os.close(write)
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        while os.read(read, 1):
            burn(ms)
        os._exit(0)
    os.close(read)
    return lambda: os.write(write, b"x")


def _no_persist() -> None:
    """Attribution: a save's persist only makes its deferred copies (the optimizer's next
    step waits for them), then reports a save that wrote nothing; for the variants that
    name "no-persist" (the flag is set per phase)."""
    from perdure.runtime.checkpoint import persist

    real = persist.Persister.run

    def run(self: Any, job: Any, stats: Any) -> str:
        if not _NO_PERSIST[0]:
            return real(self, job, stats)
        if not job.copied:
            self.stage_pending(job, stats)
        stats.name = "not-persisted"
        return "not-persisted"

    persist.Persister.run = run  # type: ignore[method-assign]


_NO_PERSIST = [False]
_NO_FSYNC = [False]


def _no_fsync() -> None:
    """Attribution: in the phases of a variant that names "no-fsync", os.fsync does nothing."""
    real = os.fsync

    def fsync(fd: Any) -> None:
        if not _NO_FSYNC[0]:
            real(fd)

    os.fsync = fsync


class _Variant:
    """What the perdure phases of one variant use: a comma-separated list of features."""

    def __init__(self, index: int, features: str, args: argparse.Namespace, plain: Any,
                 elastic: Any, one_per_next: Any) -> None:
        from perdure.runtime import Checkpointer, SavePolicy

        self.name = features
        self.on = set(features.split(","))
        self.loader = one_per_next if "one-per-next" in self.on else elastic
        self.source = Batches(self.loader, self.loader) if "loader" in self.on else plain
        self.ckpt = None
        if "save" in self.on:
            self.ckpt = Checkpointer(
                f"{args.ckpt}/{index}", keep=2, policy=SavePolicy(every_steps=args.every),
                persist="process" if "process" in self.on else "thread")
        self.burner = None
        for where in ("idle", "thread"):
            if f"burn-{where}" in self.on:
                self.burner = _burner(where, args.burn_ms)


def _variants(args: argparse.Namespace, plain: Any, elastic: Any, one_per_next: Any
              ) -> list[_Variant]:
    names = [v for v in args.variants.split(";") if v] if args.variants else [args.features]
    if any("normal-priority" in v.split(",") for v in names):
        import perdure.runtime.checkpoint.worker as worker_threads

        worker_threads.lower_this_thread = lambda: None  # type: ignore[assignment]
    if any("no-persist" in v.split(",") for v in names):
        _no_persist()
    if any("no-fsync" in v.split(",") for v in names):
        _no_fsync()
    return [_Variant(i, name, args, plain, elastic, one_per_next)
            for i, name in enumerate(names)]


def worker(args: argparse.Namespace) -> None:
    """Rank k of the job: alternate bare and perdure phases; rank 0 writes one line a phase."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    sys.path.insert(0, str(EXAMPLE))
    import train as ex

    import perdure
    from perdure.runtime import ElasticLoader, ElasticSampler, goodput

    perdure.init(seed=0)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    data = ex.Samples(SAMPLES, seed=1)
    model = ex.build_model(args.hidden)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3)
    loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, seed=0))
    plain = Batches(loader, loader.sampler)
    elastic = ElasticLoader(data, ElasticSampler(len(data), BATCH, seed=0))
    one_per_next = ElasticLoader(data, ElasticSampler(len(data), BATCH, seed=0), read_ahead=1)
    variants = _variants(args, plain, elastic, one_per_next)

    def step(batch: Any) -> None:
        _, x, y = batch
        loss = nn.functional.mse_loss(ddp(x), y, reduction="sum") / BATCH
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()

    out = open(args.out, "a") if dist.get_rank() == 0 else None  # noqa: SIM115
    done = 0  # perdure steps so far; saves fall at done + every // 2 = multiples of every
    for phase in range(2 * args.pairs * len(variants) + 1 + 2):  # two warm-up phases first
        v = None if phase % 2 == 0 else variants[(phase // 2) % len(variants)]
        _NO_PERSIST[0] = v is not None and "no-persist" in v.on
        _NO_FSYNC[0] = v is not None and "no-fsync" in v.on
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.phase):
            batch = (plain if v is None else v.source).next()
            if v is None:
                step(batch)
                continue
            done += 1
            if "goodput" in v.on:
                with goodput.step(done):
                    step(batch)
            else:
                step(batch)
            if v.burner is not None and (done + args.every // 2) % args.every == 0:
                v.burner()
            if v.ckpt is not None:
                v.ckpt.maybe_save(done + args.every // 2, {"model": model, "optim": opt,
                                                         "data": v.loader, "step": done})
        if out is not None:
            out.write(json.dumps({"phase": phase, "kind": "bare" if v is None else v.name,
                                  "t": time.perf_counter() - t0,
                                  "cpu": time.process_time() - c0}) + "\n")
            out.flush()
    for v in variants:
        if v.ckpt is not None:
            v.ckpt.close()
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def _middle(got: list[float]) -> tuple[float, float, float]:
    """(median, 25th, 75th percentile) of ``got``. No side effects."""
    got = sorted(got)
    return statistics.median(got), got[len(got) // 4], got[(3 * len(got)) // 4]


def compare(lines: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per variant, each of its phases against the mean of the bare phases beside it: the
    ratios of wall ("t") and rank 0's CPU ("cpu"), and the wall it took beyond them
    ("excess", seconds). The two warm-up phases are left out. No side effects."""
    phases = [r for r in lines if r["phase"] >= 2]
    out: dict[str, dict[str, list[float]]] = {}
    for i in range(1, len(phases) - 1):
        kind = phases[i]["kind"]
        if kind == "bare":
            continue
        rows = out.setdefault(kind, {"t": [], "cpu": [], "excess": []})
        for key in ("t", "cpu"):
            beside = (phases[i - 1][key] + phases[i + 1][key]) / 2
            rows[key].append(phases[i][key] / beside)
            if key == "t":
                rows["excess"].append(phases[i][key] - beside)
    return out


def saves_per_phase(variant: str, steps: int, every: int) -> int:
    """How many saves (or burns, for attribution) a phase of ``variant`` makes."""
    points = {"save", "burn-idle", "burn-thread"}
    return steps // every if points & set(variant.split(",")) else 0


def report(lines: list[dict[str, Any]], steps: int, every: int) -> None:
    """Each variant's phases against the bare phases beside them; for a variant that saves
    (or burns), also what each save cost rank 0 in wall time: the phase's excess over the
    bare phases beside it, divided by its saves."""
    bare = [r["t"] / steps * 1000 for r in lines if r["phase"] >= 2 and r["kind"] == "bare"]
    print(f"bare phases: {statistics.median(bare):.2f} ms/step (median; "
          f"{min(bare):.2f}-{max(bare):.2f})")
    for variant, rows in compare(lines).items():
        print(f"{variant}:")
        for key, label in (("t", "wall"), ("cpu", "rank 0 CPU")):
            med, low, high = _middle(rows[key])
            print(f"  perdure x bare, {label:<10}: median {med:.3f}  (middle half "
                  f"{low:.3f}-{high:.3f}, all {min(rows[key]):.3f}-{max(rows[key]):.3f}, "
                  f"{len(rows[key])} pairs)")
        saves = saves_per_phase(variant, steps, every)
        if saves:
            med, low, high = _middle([e / saves * 1000 for e in rows["excess"]])
            print(f"  wall per save (phase excess / {saves} saves): median {med:.2f} ms "
                  f"(middle half {low:.2f}-{high:.2f})")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode")
    w = sub.add_parser("worker")
    w.add_argument("--out", required=True)
    w.add_argument("--ckpt", required=True)
    for q in (p, w):
        q.add_argument("--pairs", type=int, default=30, help="perdure phases measured")
        q.add_argument("--phase", type=int, default=2 * EVERY, help="steps per phase")
        q.add_argument("--every", type=int, default=EVERY,
                       help="steps between saves (fewer than 100 magnifies a save's cost, "
                            "for attribution)")
        q.add_argument("--hidden", type=int, default=64, help="the MLP's width")
        q.add_argument("--switch-interval", type=float, default=0.0,
                       help="sys.setswitchinterval in the ranks (attribution: GIL hand-offs)")
        q.add_argument("--features", default=",".join(FEATURES),
                       help="what the perdure phases use, of " + ",".join(FEATURES)
                            + " (attribution: " + ",".join(ATTRIBUTION) + ")")
        q.add_argument("--variants", default="",
                       help="several feature lists separated by ';' (instead of --features): "
                            "their phases take turns, each between bare phases, and each is "
                            "reported against the bare phases beside it")
        q.add_argument("--burn-ms", type=float, default=6.0,
                       help="CPU burned at each save point by burn-idle / burn-thread")
    args = p.parse_args(argv)
    if args.mode == "worker":
        worker(args)
        return
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-alternate-"))
    print(f"$ {' '.join(sys.argv)}  (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})",
          flush=True)
    out = root / "phases.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           "--nproc-per-node=2", str(Path(__file__)), "worker", "--out", str(out), "--ckpt",
           str(root / "ckpt"), "--pairs", str(args.pairs), "--phase", str(args.phase),
           "--hidden", str(args.hidden), "--features", args.features, "--every", str(args.every),
           "--switch-interval", str(args.switch_interval), "--variants", args.variants,
           "--burn-ms", str(args.burn_ms)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PERDURE_REPORT_DIR": str(root)}
    with (root / "log").open("wb") as log:
        subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True,
                       timeout=3600)
    report([json.loads(line) for line in out.read_text().splitlines()], args.phase, args.every)
    print(f"(load {os.getloadavg()[0]:.1f} at the end; run under {root})")


if __name__ == "__main__":
    main()
