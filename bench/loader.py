"""The data path alone: DataLoader + DistributedSampler against ElasticLoader + ElasticSampler.

    .venv/bin/python bench/loader.py [--batches 2000] [--reps 7]
    flock /tmp/perdure-heavy.lock .venv/bin/python bench/loader.py --instructions [--batches 250]

One process, rank 0 of 4 (no process group, num_workers=0), examples/ddp_mlp's dataset, batch
16: each data path in turn, `--reps` times, and the figure per batch, as a ratio to torch's
DataLoader measured in the same run. Paths: torch (DataLoader + DistributedSampler), elastic
(ElasticLoader + ElasticSampler, as the example uses them), elastic-unseeded (the same with its
per-batch seeding switched off: the floor of its own bookkeeping).

Default: main-thread CPU microseconds per batch (`time.thread_time`), median and spread.
`--instructions`: instructions per batch under `valgrind --tool=callgrind` (one run per path;
counters dumped right before and after `--batches` batches that follow a warm-up pass), which
no other load on the machine changes. About 2-3 minutes per path, most of it importing torch
under valgrind.
"""

from __future__ import annotations

import argparse
import os
import shutil
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
PATHS = ("torch", "elastic", "elastic-unseeded")
_data: list[Any] = []  # the dataset, made once per process (not inside what is counted)


def drain(name: str, batches: int) -> None:
    """Iterate `batches` batches of data path `name`, epoch after epoch."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    import perdure.runtime.data.batching as batching
    from perdure.runtime import ElasticLoader, ElasticSampler

    sys.path.insert(0, str(EXAMPLE))
    import train as ex

    torch.set_num_threads(1)
    if not _data:
        _data.append(ex.Samples(SAMPLES, seed=1))
    data = _data[0]
    loader: Any
    if name == "torch":
        loader = DataLoader(data, batch_size=BATCH,
                            sampler=DistributedSampler(data, REPLICAS, 0, seed=0))
        epochs = loader.sampler
    else:
        loader = ElasticLoader(data, ElasticSampler(len(data), BATCH, seed=0, rank=0,
                                                    world_size=REPLICAS))
        epochs = loader
    if name == "elastic-unseeded":
        batching.SeededDataset.__getitems__ = (  # type: ignore[method-assign]
            lambda self, indices: self._fetch(list(indices)))
        batching.SeededDataset.fetch_ahead = (  # type: ignore[method-assign]
            lambda self, batches: [self._fetch(list(b)) for b in batches])
    got, epoch = 0, 0
    while got < batches:
        epochs.set_epoch(epoch)
        for _ in loader:
            got += 1
        epoch += 1


def _thread_seconds(name: str, batches: int) -> float:
    """Main-thread CPU seconds per batch, in a fresh process (no state shared between paths)."""
    out = subprocess.run([sys.executable, __file__, "--timed", name, "--batches", str(batches)],
                         check=True, text=True, capture_output=True).stdout
    return float(out.split()[-1]) / batches


def timed(name: str, batches: int) -> None:
    """Warm up, then print the main thread's CPU seconds for `batches` batches."""
    drain(name, 50)
    began = time.thread_time()
    drain(name, batches)
    print(time.thread_time() - began)


def _instructions(name: str, batches: int, tmp: Path) -> float:
    """Instructions per batch under callgrind, counted between two dumps around the batches."""
    out = tmp / f"cg.{name}.out"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    sys.executable, __file__, "--counted", name, "--batches", str(batches)],
                   check=True, capture_output=True)
    for dump in tmp.glob(f"cg.{name}.out*"):
        text = dump.read_text(errors="replace")
        if "Trigger: dump after" in text:
            totals = [line for line in text.splitlines() if line.startswith("totals:")]
            return int(totals[0].split()[1]) / batches
    raise SystemExit(f"no callgrind dump after the batches of {name} in {tmp}")


def counted(name: str, batches: int) -> None:
    """Under callgrind: warm up, then dump the counters around `batches` batches."""
    def dump(tag: str) -> None:
        subprocess.run(["callgrind_control", "-d", tag, str(os.getpid())], check=True,
                       capture_output=True)

    drain(name, batches)
    dump("before")
    drain(name, batches)
    dump("after")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=None)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--instructions", action="store_true")
    p.add_argument("--counted", choices=PATHS, help=argparse.SUPPRESS)
    p.add_argument("--timed", choices=PATHS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.counted:
        counted(args.counted, args.batches)
        return
    if args.timed:
        timed(args.timed, args.batches)
        return
    print(f"$ {' '.join(sys.argv)}  (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})",
          flush=True)
    per: dict[str, list[float]] = {n: [] for n in PATHS}
    if args.instructions:
        if shutil.which("valgrind") is None:
            raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
        with tempfile.TemporaryDirectory(prefix="perdure-bench-loader-") as tmp:
            for name in PATHS:
                per[name].append(_instructions(name, args.batches or 250, Path(tmp)))
        unit = "instr/batch"
    else:
        for _ in range(args.reps):
            for name in PATHS:
                per[name].append(_thread_seconds(name, args.batches or 2000) * 1e6)
        unit = "us/batch"
    print(f"{'data path':<18} {unit:>12} {'spread':>21} {'x torch':>8}")
    for name in PATHS:
        ratios = [t / b for t, b in zip(per[name], per["torch"], strict=True)]
        print(f"{name:<18} {statistics.median(per[name]):12.1f} {min(per[name]):10.1f} .. "
              f"{max(per[name]):8.1f} {statistics.median(ratios):8.2f}")


if __name__ == "__main__":
    main()
