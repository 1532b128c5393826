"""Benchmark the local backend's hot path against bare process spawning, in the same run.

Run: flock /tmp/perdure-bench.lock .venv/bin/python bench/local_backend.py [--active 100]

Every figure is printed next to its baseline measured here and now:
- launch() call vs a bare `Popen([python, -c, pass], start_new_session=True)`;
- launch -> exit observed through poll() vs `subprocess.run([python, -c, pass])`;
- poll() with N running replicas vs N bare os.stat calls (the floor of "one stat per launch");
- stop(SIGTERM) -> exit observed vs os.kill + waitpid on a direct child;
- a supervisor's RSS and PSS vs those of the replica it runs (a sleeping interpreter);
- launch -> torch imported in a `python SCRIPT` replica, warm standby vs cold start;
- launch -> exit seen with a cgroup of the replica's own (`--only-tree`; the default, what
  kills its whole tree) vs without one (memory_mechanism="rss": the subreaper sweep only).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from perdure.backends.base import NodeInfo
from perdure.backends.local import LocalBackend
from perdure.core.events import Launch, LaunchFailed, ReplicaExited, ReplicaStarted, Stop

PY = sys.executable
SLEEP = "import time; time.sleep(120)"


class Bench:
    def __init__(self, root: Path, mechanism: str = "auto") -> None:
        self.root = root
        self.backend = LocalBackend(root / "state", [NodeInfo("a", 1000)],
                                    memory_mechanism=mechanism, warm_pool=0)
        self.count = 0

    def launch(self, code: str) -> str:
        self.count += 1
        launch_id = f"b{self.count}"
        self.backend.launch(
            Launch(
                launch_id=launch_id,
                job_id="bench",
                replica=f"worker-{self.count}",
                node="a",
                command=(PY, "-c", code),
                env={"OMP_NUM_THREADS": "1"},
                cwd=str(self.root),
                memory_mb=None,
                log_prefix=str(self.root / "logs" / f"worker-{self.count}"),
            )
        )
        return launch_id

    def wait(self, ids: set[str], kind: type, poll_every: float = 0.005) -> dict[str, float]:
        """Poll until `kind` was seen for every id; when each was seen (perf_counter)."""
        seen: dict[str, float] = {}
        deadline = time.monotonic() + 120
        while not ids <= set(seen):
            for obs in self.backend.poll():
                if isinstance(obs, LaunchFailed):
                    raise RuntimeError(obs.message)
                if isinstance(obs, kind):
                    seen[obs.launch_id] = time.perf_counter()
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {kind.__name__}")
            time.sleep(poll_every)
        return seen


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(values) * 1e3:7.2f} ms  p95 {p95 * 1e3:7.2f} ms"


def _row(name: str, ours: list[float], base: list[float], base_name: str) -> None:
    ratio = statistics.median(ours) / statistics.median(base)
    print(f"{name:<34} {_ms(ours)}   x{ratio:5.2f} of {base_name} ({_ms(base)})")


def _timed(fn: Callable[[], object]) -> float:
    begin = time.perf_counter()
    fn()
    return time.perf_counter() - begin


def launch_call(bench: Bench, rounds: int) -> None:
    """The launch() call alone, each launch on an idle machine (the previous one has ended)."""
    ours, base = [], []
    for _ in range(rounds):
        begin = time.perf_counter()
        proc = subprocess.Popen([PY, "-c", "pass"], start_new_session=True)
        base.append(time.perf_counter() - begin)
        proc.wait()
        begin = time.perf_counter()
        launch_id = bench.launch("pass")
        ours.append(time.perf_counter() - begin)
        bench.wait({launch_id}, ReplicaExited)
    _row("launch() call", ours, base, "bare Popen")


def launch_to_exit(bench: Bench, rounds: int) -> None:
    """A replica that does nothing: launch -> ReplicaExited seen, vs running it directly."""
    ours, base = [], []
    for _ in range(rounds):
        base.append(_timed(lambda: subprocess.run([PY, "-c", "pass"], check=True)))
        begin = time.perf_counter()
        launch_id = bench.launch("pass")
        ours.append(bench.wait({launch_id}, ReplicaExited)[launch_id] - begin)
    _row("launch -> exit seen (5 ms polls)", ours, base, "subprocess.run")


def burst(bench: Bench, n: int) -> list[str]:
    """n launches back to back (a whole attempt at once); the calls and the CPU they cost."""
    calls = []
    cpu = time.process_time()
    ids = []
    for _ in range(n):
        begin = time.perf_counter()
        ids.append(bench.launch(SLEEP))
        calls.append(time.perf_counter() - begin)
    cpu = time.process_time() - cpu
    base = []
    procs = []
    cpu_base = time.process_time()
    for _ in range(n):
        begin = time.perf_counter()
        procs.append(subprocess.Popen([PY, "-c", SLEEP], start_new_session=True))
        base.append(time.perf_counter() - begin)
    cpu_base = time.process_time() - cpu_base
    for proc in procs:
        proc.kill()
        proc.wait()
    _row(f"burst of {n} launch() calls", calls, base, "bare Popen burst")
    print(
        f"{'':<34} controller CPU per launch {cpu / n * 1e3:.2f} ms vs bare Popen "
        f"{cpu_base / n * 1e3:.2f} ms (x{cpu / cpu_base:.2f})"
    )
    return ids


def poll_cost(bench: Bench, ids: list[str]) -> None:
    """poll() with every replica running, vs one os.stat per launch (the design's floor)."""
    bench.wait(set(ids), ReplicaStarted)
    paths = [str(bench.root / "state" / "launches" / i / "exit.json") for i in ids]
    ours = [_timed(bench.backend.poll) for _ in range(300)]
    base = [_timed(lambda: [os.path.exists(p) for p in paths]) for _ in range(300)]
    _row(f"poll() with {len(ids)} running", ours, base, f"{len(ids)} os.stat")


def _memory_mb(pid: int, field: str) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def supervisor_memory(bench: Bench, ids: list[str]) -> None:
    """What a supervisor costs in memory, vs the replica it runs (a sleeping interpreter)."""
    launches = bench.root / "state" / "launches"
    statuses = [json.loads((launches / i / "status.json").read_text()) for i in ids]
    for field in ("Rss", "Pss"):
        ours = statistics.median(_memory_mb(s["supervisor_pid"], field) for s in statuses)
        base = statistics.median(_memory_mb(s["pid"], field) for s in statuses)
        print(
            f"{'supervisor ' + field:<34} median {ours:7.2f} MB"
            f"{'':<18}x{ours / base:5.2f} of the replica's own ({base:.2f} MB)"
        )


def stop_latency(bench: Bench, rounds: int) -> None:
    """stop(SIGTERM) of a willing replica -> ReplicaExited seen, vs kill + waitpid directly."""
    ours, base = [], []
    for _ in range(rounds):
        proc = subprocess.Popen([PY, "-c", SLEEP])
        time.sleep(0.15)
        begin = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        base.append(time.perf_counter() - begin)
        launch_id = bench.launch(SLEEP)
        bench.wait({launch_id}, ReplicaStarted)
        time.sleep(0.15)
        begin = time.perf_counter()
        bench.backend.stop(Stop(launch_id, signal.SIGTERM, 5.0, "bench"))
        ours.append(bench.wait({launch_id}, ReplicaExited, 0.001)[launch_id] - begin)
    _row("stop(SIGTERM) -> exit seen", ours, base, "kill+waitpid")


TORCH_SCRIPT = "import time\nimport torch\nprint(time.time(), flush=True)\n"


def _first_line_after(backend: LocalBackend, root: Path, launch_id: str, begin: float) -> float:
    """Launch `python first_line.py` as `launch_id`; seconds from launch() to its line."""
    log = root / "logs" / f"{launch_id}.out"
    backend.launch(
        Launch(
            launch_id,
            "bench",
            launch_id,
            "a",
            (PY, "first_line.py"),
            {"OMP_NUM_THREADS": "1"},
            str(root),
            None,
            str(root / "logs" / launch_id),
        )
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        lines = log.read_text().splitlines() if log.exists() else []
        if len(lines) > 1:
            return float(lines[1]) - begin
        time.sleep(0.002)
    raise RuntimeError(f"{launch_id} printed nothing within 120 s; see {log}")


def warm_start(root: Path, rounds: int) -> None:
    """launch -> torch imported in the script: a warm standby (pool of 2) vs a cold start."""
    (root / "first_line.py").write_text(TORCH_SCRIPT)
    warm = LocalBackend(root / "warm-state", [NodeInfo("a", 100)], warm_pool=2)
    cold = LocalBackend(root / "cold-state", [NodeInfo("a", 100)], warm_pool=0)
    warm.prewarm()
    ours, base = [], []
    try:
        for i in range(rounds):
            # Each round starts on a quiet machine: the pool is full, the last replica gone.
            while (warm.warm_pool_status() or {}).get("ready", 0) < 2:
                time.sleep(0.05)
            time.sleep(1.5)  # the exiting replicas of the last round release the CPU
            base.append(_first_line_after(cold, root, f"c{i}", time.time()))
            while (warm.warm_pool_status() or {}).get("ready", 0) < 2:
                time.sleep(0.05)
            time.sleep(1.5)
            ours.append(_first_line_after(warm, root, f"w{i}", time.time()))
            status_path = root / "warm-state" / "launches" / f"w{i}" / "status.json"
            while not status_path.exists():  # the script may print before it is written
                time.sleep(0.01)
            status = json.loads(status_path.read_text())
            if not status["warm"]:
                raise RuntimeError(f"launch w{i} started cold with a full pool")
    finally:
        warm.close()
        cold.close()
    _row("launch -> torch imported (warm)", ours, base, "cold start")
    speedup = statistics.median(base) / statistics.median(ours)
    print(f"{'':<34} a warm start reaches the script's torch {speedup:.0f}x sooner")


def tree_cost(root: Path, rounds: int) -> None:
    """What a replica's own cgroup costs a launch: launch -> exit seen, alternating."""
    with_cgroup, without = Bench(root / "cgroup"), Bench(root / "sweep", "rss")
    ours, base = [], []
    for _ in range(rounds):
        for bench, out in ((without, base), (with_cgroup, ours)):
            begin = time.perf_counter()
            launch_id = bench.launch("pass")
            out.append(bench.wait({launch_id}, ReplicaExited)[launch_id] - begin)
    status = json.loads(next((root / "cgroup").glob("state/launches/*/status.json")).read_text())
    _row(f"launch -> exit, tree: {status['tree']}", ours, base, "no cgroup (sweep)")
    for bench in (with_cgroup, without):
        bench.backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--active", type=int, default=100)
    parser.add_argument("--warm-rounds", type=int, default=5)
    parser.add_argument("--only-warm", action="store_true", help="run the warm-start rows only")
    parser.add_argument("--only-tree", action="store_true", help="run the cgroup row only")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="perdure-bench-") as tmp:
        if args.only_tree:
            tree_cost(Path(tmp), args.rounds)
            return
        if args.warm_rounds:
            warm_start(Path(tmp), args.warm_rounds)
        if args.only_warm:
            return
        bench = Bench(Path(tmp))
        launch_call(bench, args.rounds)
        launch_to_exit(bench, args.rounds)
        stop_latency(bench, max(5, args.rounds // 2))
        ids = burst(bench, args.active)
        try:
            poll_cost(bench, ids)
            supervisor_memory(bench, ids)
        finally:
            bench.backend.kill_node("a")
            bench.wait(set(ids), ReplicaExited)


if __name__ == "__main__":
    main()
