"""Checkpoint interval benchmark: `every: auto` (Young/Daly, learned online) against fixed
intervals 10x shorter and 10x longer, and against the best fixed interval a sweep finds.

    .venv/bin/python bench/interval.py [--mtbf 600] [--restart 5] [--state-mb 256]

1. C, the blocking cost of one save, is measured in this run: a real `Checkpointer` blocking
   save of a `--state-mb` state to a temporary directory (median of 3).
2. A job of `--work-mtbfs` x MTBF seconds of productive work then runs, for each interval
   policy, against the same failure times (a Poisson process in wall-clock time, `--seeds`
   sequences): work since the last completed save is lost at a failure, each failure costs
   `--restart` seconds, a failure during a save loses that save. Goodput = work / wall time.
3. `auto` is perdure's controller logic itself (core.interval): it starts from the prior (one
   failure a day), learns C from the first save and the MTBF from the failures and running time
   it has seen, and republishes when the interval moves by more than 10%; it never sees the
   true MTBF. The fixed intervals are 10x shorter and 10x longer than auto's final choice, and
   a geometric sweep between them: the best of the sweep is the baseline every figure is a
   ratio against.

The failures and the training progress are simulated (thousands of failures per policy would
take days of real training); C is real and the interval logic is the shipped code.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import tempfile
import time
from collections.abc import Callable

import torch

from perdure.core import interval as iv
from perdure.runtime import Checkpointer


def measure_save_cost(state_mb: int) -> float:
    """Median blocking time of a synchronous save of `state_mb` MB (real Checkpointer)."""
    state = {"w": torch.randn(state_mb * 2**20 // 4)}
    with tempfile.TemporaryDirectory(prefix="perdure-bench-interval-") as d:
        ckpt = Checkpointer(d, keep=1, async_save=False)
        times = []
        for step in range(1, 4):
            began = time.perf_counter()
            ckpt.save(step, state)
            times.append(time.perf_counter() - began)
        ckpt.close()
    return statistics.median(times)


class Auto:
    """The controller's choice, learned online from what the job has seen (core.interval)."""

    def __init__(self, ceiling: float = 14400.0) -> None:
        self.rec, self.ceiling = iv.JobRecord(), ceiling
        self.interval = self._choose(0.0).seconds

    def _choose(self, wall: float) -> iv.Interval:
        self.rec.seconds = wall
        chosen = iv.choose(self.rec, iv.Cluster(self.rec.failures, wall), self.ceiling)
        if iv.changed(self.rec.published, chosen):
            self.rec.published = chosen
        assert self.rec.published is not None
        return self.rec.published

    def saved(self, cost: float, wall: float) -> None:
        if len(self.rec.costs) < 3:
            iv.note_cost(self.rec, cost)
        self.interval = self._choose(wall).seconds

    def failed(self, wall: float) -> None:
        self.rec.failures += 1
        self.interval = self._choose(wall).seconds


class Fixed:
    def __init__(self, seconds: float) -> None:
        self.interval = seconds

    def saved(self, cost: float, wall: float) -> None:
        pass

    def failed(self, wall: float) -> None:
        pass


def run(policy: Auto | Fixed, work: float, cost: float, restart: float,
        failures: list[float]) -> tuple[float, int]:
    """Wall time to finish `work` seconds of training under `failures` (wall-clock times)."""
    t, done, pending, k = 0.0, 0.0, 0.0, 0
    lost = 0
    while done < work:
        while k < len(failures) and failures[k] <= t:
            k += 1
        next_fail = failures[k] if k < len(failures) else float("inf")
        seg = min(policy.interval - pending, work - done - pending)
        finishing = done + pending + seg >= work
        end = t + seg + (0.0 if finishing else cost)
        if end <= next_fail:
            t, done, pending = end, done + pending + seg, 0.0
            if not finishing:
                policy.saved(cost, t)
            continue
        t, pending, lost = next_fail + restart, 0.0, lost + 1
        policy.failed(next_fail)
    return t, lost


def poisson(mtbf: float, horizon: float, seed: int) -> list[float]:
    rnd, t, out = random.Random(seed), 0.0, []
    while t < horizon:
        t += rnd.expovariate(1.0 / mtbf)
        out.append(t)
    return out


def goodput(make: Callable[[], Auto | Fixed], work: float, cost: float, restart: float,
            sequences: list[list[float]]) -> float:
    return statistics.mean(work / run(make(), work, cost, restart, f)[0] for f in sequences)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mtbf", type=float, default=600.0, help="true mean time between failures")
    p.add_argument("--restart", type=float, default=5.0, help="seconds lost per failure")
    p.add_argument("--state-mb", type=int, default=256, help="checkpointed state size")
    p.add_argument("--work-mtbfs", type=float, default=200.0, help="job length in MTBFs")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--sweep", type=int, default=21, help="fixed intervals in the sweep")
    a = p.parse_args()
    cost = measure_save_cost(a.state_mb)
    work = a.work_mtbfs * a.mtbf
    sequences = [poisson(a.mtbf, 50 * work, seed) for seed in range(a.seeds)]
    print(f"save cost C = {cost:.3f}s (measured: blocking save of {a.state_mb} MB); true MTBF "
          f"{a.mtbf:.0f}s; restart {a.restart:.1f}s; {work:.0f}s of work x {a.seeds} failure "
          f"sequences")
    finals = []
    for f in sequences:
        auto = Auto()
        run(auto, work, cost, a.restart, f)
        finals.append(auto.interval)
    tau = statistics.median(finals)
    g_auto = goodput(Auto, work, cost, a.restart, sequences)
    sweep = [tau / 10 * 100 ** (i / (a.sweep - 1)) for i in range(a.sweep)]
    fixed = {s: goodput(functools.partial(Fixed, s), work, cost, a.restart, sequences)
             for s in sweep}
    best = max(fixed, key=lambda s: fixed[s])
    young = iv.young_daly(cost, a.mtbf, 14400.0)
    print(f"auto's final interval {tau:.1f}s (Young/Daly with the true MTBF: {young:.1f}s)")
    print(f"{'policy':<34}{'interval':>10}{'goodput':>10}{'vs best fixed':>15}")
    rows = [("auto (learned online from the prior)", tau, g_auto),
            ("fixed, 10x shorter than auto", sweep[0], fixed[sweep[0]]),
            ("fixed, 10x longer than auto", sweep[-1], fixed[sweep[-1]]),
            (f"best fixed of a {a.sweep}-point sweep", best, fixed[best])]
    for name, s, g in rows:
        print(f"{name:<34}{s:>9.1f}s{g:>10.4f}{g / fixed[best]:>14.3f}x")
    verdict = "met" if g_auto >= 0.97 * fixed[best] else "NOT met"
    print(f"goal (auto within 3% of the best fixed interval): {verdict} "
          f"({(1 - g_auto / fixed[best]) * 100:+.2f}% below)")


if __name__ == "__main__":
    main()
