"""Controller benchmarks: failure detection latency (local backend) and core scale (fake).

    .venv/bin/python bench/controller.py [--restarts 20] [--jobs 1000] [--replicas 10]
        [--only detection|scale|big] [--big-nodes 2048] [--big-per-node 8]

Every figure is printed with a baseline measured in the same run:
- detection: replica exit -> replacement launched (controller decision + launch call), and
  exit -> the replacement's Python running, against a bare `Popen`/`wait` respawn loop (the
  floor) and torchrun --max-restarts (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, see
  MACHINE-NOTES.md);
- scale: 1,000 jobs x 10 replicas through admission, run, restarts and retries on the fake
  backend with a real sqlite store: tick time percentiles against a naive controller that
  writes every job each tick, and peak memory;
- one big job: 2,048 nodes x 8 replicas = 16,384 replicas through the real controller and
  sqlite store: admission, a node failure and the group restart (or, elastic, the shrink) it
  causes, tick times per phase (wall, and the tick's own CPU time: on a shared machine the
  wall time also counts waiting for a core) and peak memory.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perdure.backends.base import NodeInfo
from perdure.backends.fake import FakeBackend, FakeRun
from perdure.backends.local import LocalBackend
from perdure.controller.loop import Controller
from perdure.core.clusterspec import ClusterSpec, NodeSpec, QueueSpec
from perdure.core.events import Launch
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec
from perdure.store.sqlite import Store

# The worker notes when its Python starts and exits (before anything heavy is imported).
WORKER = """
import os, sys, time
t = time.time()
with open(os.environ["BENCH_LOG"], "a") as f:
    f.write(f"start {t}\\n")
time.sleep(float(os.environ.get("BENCH_RUN", "0.3")))
with open(os.environ["BENCH_LOG"], "a") as f:
    f.write(f"exit {time.time()}\\n")
sys.exit(int(os.environ.get("BENCH_CODE", "1")))
"""


def gaps(log: Path) -> list[float]:
    """Seconds from each exit to the next start, from a worker log."""
    lines = [line.split() for line in log.read_text().splitlines()]
    out, last_exit = [], None
    for kind, t in lines:
        if kind == "exit":
            last_exit = float(t)
        elif last_exit is not None:
            out.append(float(t) - last_exit)
            last_exit = None
    return out


def floor_respawn(n: int, tmp: Path) -> list[float]:
    log = tmp / "floor.log"
    env = {**os.environ, "BENCH_LOG": str(log)}
    for _ in range(n + 1):
        subprocess.run([sys.executable, "-c", WORKER], env=env)
    return gaps(log)


def torchrun_respawn(n: int, tmp: Path) -> list[float]:
    log = tmp / "torchrun.log"
    script = tmp / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "BENCH_LOG": str(log), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
         "--max-restarts", str(n), "--monitor-interval", "0.1", str(script)],
        env=env, capture_output=True,
    )
    return gaps(log)


class TimedBackend(LocalBackend):
    """The local backend, noting when each launch call returned."""

    launched_at: dict[str, float]

    def launch(self, launch: Launch) -> None:
        super().launch(launch)
        self.launched_at[launch.launch_id] = time.time()


def perdure_respawn(n: int, tmp: Path) -> tuple[list[float], list[float]]:
    state = tmp / "state"
    state.mkdir()
    log = tmp / "perdure.log"
    spec = JobSpec.model_validate({
        "name": "bench", "env": {"BENCH_LOG": str(log)},
        "pools": [{"name": "worker", "command": ["python", "-c", WORKER]}],
        "restart": {"max_replica_restarts": n, "max_job_retries": 0},
    })
    backend = TimedBackend(state, [NodeInfo("local", 2)])
    backend.launched_at = {}
    exits: dict[str, float] = {}
    store = Store(state / "perdure.db")
    cluster = ClusterSpec(nodes=[NodeSpec(name="local", slots=2)],
                          queues=[QueueSpec(name="default", quota=None)])
    ctl = Controller(state, store, backend, cluster,
                     LaunchSettings(str(state), sys.executable), interval=0.01)
    poll = backend.poll

    def noting_poll() -> list:  # type: ignore[type-arg]
        obs = poll()
        for o in obs:
            if type(o).__name__ == "ReplicaExited":
                exits[o.launch_id] = o.time  # type: ignore[union-attr]
        return obs

    backend.poll = noting_poll  # type: ignore[method-assign]
    ctl.start()
    job = Job("bench-0", spec, str(tmp), time.time(), replicas=make_replicas(spec))
    store.submit(job)
    ctl.run(until=lambda: store.job("bench-0").state.terminal)  # type: ignore[union-attr]
    ctl.close()
    order = sorted(backend.launched_at, key=backend.launched_at.get)  # type: ignore[arg-type]
    decided = [backend.launched_at[b] - exits[a] for a, b in itertools.pairwise(order)
               if a in exits]
    return decided, gaps(log)


def ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e3:7.1f} ms  p90 {pct(xs, 90) * 1e3:7.1f} ms"


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def bench_detection(n: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        floor = floor_respawn(n, tmp)
        decided, perdure = perdure_respawn(n, tmp)
        torchrun = torchrun_respawn(n, tmp)
    print(f"\n## detection latency, {n} restarts of a replica that exits 1 after 0.3 s")
    print(f"perdure exit -> replacement launched      {ms(decided)}")
    print(f"perdure exit -> replacement Python runs   {ms(perdure)}")
    print(f"floor: Popen/wait respawn loop            {ms(floor)}")
    print(f"torchrun --max-restarts (monitor 0.1 s)   {ms(torchrun)}")
    med = statistics.median
    print(f"ratio perdure/floor (exit -> running)     {med(perdure) / med(floor):.2f}x")
    print(f"ratio perdure/torchrun (exit -> running)  {med(perdure) / med(torchrun):.2f}x")


def scale_script(rng: random.Random) -> FakeRun:
    roll = rng.random()
    if roll < 0.05:
        return FakeRun(seconds=rng.uniform(1, 5), exit_code=1)  # restart
    if roll < 0.06:
        return FakeRun(seconds=rng.uniform(1, 5), exit_code=134, signal=6)  # job retry
    return FakeRun(seconds=None)  # runs until its primary is done


def scale_load(state: Path, n_jobs: int, replicas: int,
               now: list[float]) -> tuple[Controller, Store, FakeBackend]:
    """The scale load: n_jobs x replicas queued for a started controller on the fake backend
    (100 nodes x 20 slots: ~200 jobs at once; restarts, retries), its clock `now[0]`."""
    rng = random.Random(0)
    primary_ends: dict[str, float] = {}

    def script(launch: Launch) -> FakeRun:
        if launch.replica == "worker-0":
            run = primary_ends.setdefault(launch.job_id, rng.uniform(5, 30))
            return FakeRun(seconds=run, exit_code=0)
        return scale_script(rng)

    nodes = [NodeInfo(f"n{i}", 20) for i in range(100)]
    store = Store(state / "perdure.db")
    backend = FakeBackend(nodes, script, clock=lambda: now[0])
    cluster = ClusterSpec(backend="fake", nodes=[NodeSpec(name=n.name, slots=n.slots)
                                                 for n in nodes],
                          queues=[QueueSpec(name="default", quota=None)])
    ctl = Controller(state, store, backend, cluster,
                     LaunchSettings(str(state), sys.executable), clock=lambda: now[0])
    ctl.start()
    spec = JobSpec.model_validate({
        "name": "scale", "pools": [{"name": "worker", "replicas": replicas,
                                    "command": ["python", "t.py"]}]})
    with store.transaction():
        for i in range(n_jobs):
            job = Job(f"scale-{i}", spec, str(state), now[0] + i * 1e-6,
                      replicas=make_replicas(spec))
            store._put_job(job, new=True)
            store._command("submit", job.id, False, job.created)
    return ctl, store, backend


def bench_scale(n_jobs: int, replicas: int) -> None:
    now = [1000.0]
    with tempfile.TemporaryDirectory() as d:
        began = time.perf_counter()
        ctl, store, backend = scale_load(Path(d), n_jobs, replicas, now)
        ticks = 0
        while True:
            ctl.tick()
            ticks += 1
            now[0] += 0.25
            if not ctl.snapshot.jobs and ticks > 1:
                break
        wall = time.perf_counter() - began
        naive = naive_tick_seconds(store)
        rows = store.job_rows()
    t = ctl.tick_seconds
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    states: dict[str, int] = {}
    for r in rows:
        states[r["state"]] = states.get(r["state"], 0) + 1
    print(f"\n## core scale: {n_jobs} jobs x {replicas} replicas, fake backend, sqlite store")
    print(f"ticks {ticks}, wall {wall:.1f} s, launches {len(backend.launched)}, final {states}")
    print(f"tick p50 {pct(t, 50) * 1e3:.2f} ms  p99 {pct(t, 99) * 1e3:.2f} ms  "
          f"max {max(t) * 1e3:.2f} ms  (goal p99 < 20 ms)")
    print(f"baseline: naive tick writing all {n_jobs} jobs: {naive * 1e3:.1f} ms; "
          f"p99/naive {pct(t, 99) / naive:.3f}x")
    print(f"peak RSS of the process {peak_mb:.0f} MB")


def naive_tick_seconds(store: Store) -> float:
    """A controller that rewrites every job each tick (the simple design we avoid)."""
    jobs = [j for j in (store.job(r["id"]) for r in store.job_rows()) if j is not None]
    for j in jobs:  # as if never written: every replica row too
        assert store.rows is not None
        store.rows.forget(j.id)
    began = time.perf_counter()
    store.commit_tick(jobs, [], None, None)
    return time.perf_counter() - began


def big_job(state: Path, nodes: int, per_node: int, elastic: bool,
            now: list[float]) -> tuple[Controller, Store, FakeBackend, str]:
    """One job of nodes x per_node replicas (one slot each) on nodes + 8 free nodes."""
    infos = [NodeInfo(f"n{i:05d}", per_node) for i in range(nodes + 8)]
    store = Store(state / "perdure.db")
    backend = FakeBackend(infos, lambda launch: FakeRun(seconds=None), clock=lambda: now[0])
    cluster = ClusterSpec(backend="fake", nodes=[NodeSpec(name=n.name, slots=n.slots)
                                                 for n in infos])
    ctl = Controller(state, store, backend, cluster,
                     LaunchSettings(str(state), sys.executable), clock=lambda: now[0])
    ctl.start()
    replicas = nodes * per_node
    pool = {"name": "worker", "replicas": replicas, "command": ["python", "t.py"]}
    if elastic:
        pool["min_replicas"] = replicas // 2
    spec = JobSpec.model_validate({"name": "big", "pools": [pool],
                                   "restart": {"max_replica_restarts": 100}})
    job = Job("big-0", spec, str(state), now[0], replicas=make_replicas(spec))
    store.submit(job)
    return ctl, store, backend, job.id


def bench_big(nodes: int, per_node: int) -> None:
    """Admission, a node failure and the group restart (or elastic shrink) it causes, for
    one job of nodes x per_node replicas: each phase's ticks until the job is RUNNING again."""
    print(f"\n## one job of {nodes * per_node} replicas on {nodes} nodes x {per_node} slots, "
          "real controller + sqlite store, fake backend")
    for elastic in (False, True):
        now = [1000.0]
        with tempfile.TemporaryDirectory() as d:
            ctl, store, backend, job_id = big_job(Path(d), nodes, per_node, elastic, now)
            phases = [("admission: launch all, all started", None),
                      ("node n00003 fails", "fail-node")]
            kind = "elastic shrink" if elastic else "group restart"
            for name, command in phases:
                if command:
                    store.command(command, "n00003")
                first = len(ctl.tick_seconds)
                began = time.perf_counter()
                whole: list[float] = []  # the tick with the collection after it
                for _ in range(200):
                    t0 = time.perf_counter()
                    ctl.tick()
                    whole.append(time.perf_counter() - t0)
                    now[0] += 0.25
                    job = ctl.snapshot.jobs.get(job_id)
                    if job is not None and job.state.value == "RUNNING" and (
                            command is None or len(ctl.tick_seconds) - first > 4):
                        break
                t, cpu = ctl.tick_seconds[first:], ctl.tick_cpu_seconds[first:]
                label = name if command is None else f"{name} -> {kind}"
                print(f"{label:<46} ticks {len(t):3d}  p50 {pct(t, 50) * 1e3:7.1f} ms  "
                      f"p99 {pct(t, 99) * 1e3:7.1f} ms  max {max(t) * 1e3:7.1f} ms  "
                      f"(CPU p99 {pct(cpu, 99) * 1e3:6.1f} ms; with the collection after it "
                      f"p99 {pct(whole, 99) * 1e3:6.1f} ms)  "
                      f"phase {time.perf_counter() - began:5.2f} s  "
                      f"launches {len(backend.launched)}")
            ctl.close()
            store.close()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of the process {peak_mb:.0f} MB (goal: tick p99 <= 50 ms)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--restarts", type=int, default=20)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--replicas", type=int, default=10)
    p.add_argument("--only", choices=["detection", "scale", "big"])
    p.add_argument("--big-nodes", type=int, default=2048)
    p.add_argument("--big-per-node", type=int, default=8)
    args = p.parse_args()
    if args.only in (None, "detection"):
        bench_detection(args.restarts)
    if args.only in (None, "scale"):
        bench_scale(args.jobs, args.replicas)
    if args.only in (None, "big"):
        bench_big(args.big_nodes, args.big_per_node)


if __name__ == "__main__":
    main()
