"""`perdure serve` benchmark: API latency and the controller's tick with the API beside it.

    .venv/bin/python bench/serve.py [--jobs 1000] [--replicas 10] [--rps 20] [--rounds 3]

The load is bench/controller.py's scale load (1,000 jobs x 10 replicas on the fake backend with
a real sqlite store, restarts and retries). The same controller run is measured twice: alone
(the baseline), and in `perdure serve`'s thread beside uvicorn under a steady request load from
another process (GET /api/v1/jobs, a job page = describe + timeline, in turn); the two runs
are interleaved, round after round, and each ratio is against the same round's baseline.
Latencies are printed against a floor measured in the same run: a static file through the same
server, auth and middleware.
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

sys.path.insert(0, str(Path(__file__).parent))
from controller import pct, scale_load

from perdure.controller.loop import Controller
from perdure.serve.auth import Auth
from perdure.serve.context import ServeContext
from perdure.serve.server import Service, bind

TOKEN = "bench-token-" + "x" * 32
TICK = 0.25  # fake seconds per tick, as bench/controller.py


def clock_driver(ctl: Controller, now: list[float]) -> Callable[[], bool]:
    """Advance the fake clock after each tick; true once every job has ended."""
    ticks = [0]

    def after_tick() -> bool:
        now[0] += TICK
        ticks[0] += 1
        return not ctl.snapshot.jobs and ticks[0] > 1
    return after_tick


def run_alone(n_jobs: int, replicas: int) -> list[float]:
    with tempfile.TemporaryDirectory() as d:
        now = [1000.0]
        ctl, store, _ = scale_load(Path(d), n_jobs, replicas, now)
        ctl.run(until=clock_driver(ctl, now))
        ctl.close()
        store.close()
        return list(ctl.tick_seconds)


def run_with_api(n_jobs: int, replicas: int, rps: float
                 ) -> tuple[list[float], dict[str, list[float]]]:
    with tempfile.TemporaryDirectory() as d:
        state = Path(d)
        now = [1000.0]
        ctl, store, _ = scale_load(state, n_jobs, replicas, now)
        ctx = ServeContext(state, ctl.cluster, Auth(TOKEN), state)
        sock = bind("127.0.0.1", 0)
        service = Service(ctx, sock, ctl, until=clock_driver(ctl, now))
        ids = [r["id"] for r in store.job_rows()]
        (state / "ids.json").write_text(json.dumps(ids))
        load = subprocess.Popen([sys.executable, __file__, "--load", service.url.rstrip("/"),
                                 str(rps), str(state / "ids.json")], stdout=subprocess.PIPE,
                                text=True)
        service.run()
        load.send_signal(signal.SIGTERM)
        out, _ = load.communicate(timeout=60)
        store.close()
        return list(service.tick_seconds), json.loads(out)


def load_loop(url: str, rps: float, ids_file: str) -> None:
    """The request load (its own process): one request every 1/rps s until SIGTERM."""
    import httpx

    ids = json.loads(Path(ids_file).read_text())
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    lat: dict[str, list[float]] = {"jobs": [], "job_page": [], "floor": []}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
        while True:  # the server starts after this process: wait for it
            try:
                c.get("/favicon.ico")
                break
            except httpx.TransportError:
                time.sleep(0.05)
        i, next_at = 0, time.monotonic()
        while not stop[0]:
            began = time.perf_counter()
            try:
                if i % 3 == 0:
                    c.get("/api/v1/jobs", params={"limit": 50, "offset": (i * 50) % len(ids)})
                    lat["jobs"].append(time.perf_counter() - began)
                elif i % 3 == 1:
                    job = ids[(i * 37) % len(ids)]
                    c.get(f"/api/v1/jobs/{job}")
                    c.get(f"/api/v1/jobs/{job}/timeline")
                    lat["job_page"].append(time.perf_counter() - began)
                else:
                    c.get("/favicon.ico")
                    lat["floor"].append(time.perf_counter() - began)
            except httpx.TransportError:
                break  # the server has gone: the run is over
            i += 1
            next_at += 1 / rps
            time.sleep(max(0.0, next_at - time.monotonic()))
    print(json.dumps(lat))


def ms(xs: list[float], p: float) -> float:
    return pct(xs, p) * 1e3


def report(n_jobs: int, replicas: int, rps: float, alone: list[list[float]],
           rounds: list[tuple[list[float], dict[str, list[float]]]]) -> None:
    print(f"\n## serve: {n_jobs} jobs x {replicas} replicas (fake backend, sqlite), "
          f"{rps:g} requests/s from another process, {len(alone)} interleaved rounds")
    base = [pct(t, 99) for t in alone]
    print("controller alone (baseline), tick p99 per round: "
          + ", ".join(f"{b * 1e3:.2f} ms" for b in base))
    ratios = [pct(ticks, 99) / b for (ticks, _), b in zip(rounds, base, strict=True)]
    print("\n### with the API: tick p99 per round "
          + ", ".join(f"{pct(t, 99) * 1e3:.2f} ms" for t, _ in rounds)
          + "; ratio to the same round alone: "
          + ", ".join(f"{r:.2f}x" for r in ratios)
          + f" (median {statistics.median(ratios):.2f}x; goal <= 1.2x)")
    lat = {k: [x for _, lt in rounds for x in lt[k]] for k in ("jobs", "job_page", "floor")}
    floor = lat["floor"]
    for name, label in (("jobs", "GET /api/v1/jobs (page of 50)"),
                        ("job_page", "job page (describe + timeline)"),
                        ("floor", "floor: GET /favicon.ico")):
        xs = lat[name]
        print(f"{label:<34} n {len(xs):4d}  p50 {ms(xs, 50):7.2f} ms  p99 {ms(xs, 99):7.2f}"
              f" ms  p50/floor {statistics.median(xs) / statistics.median(floor):6.1f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--replicas", type=int, default=10)
    p.add_argument("--rps", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--load", nargs=3, metavar=("URL", "RPS", "IDS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.load:
        load_loop(args.load[0], float(args.load[1]), args.load[2])
        return
    os.environ.setdefault("PERDURE_WARM_POOL", "0")
    # Rounds interleave the two runs, so a change in the machine's load between them
    # (it is shared) shows up as a spread across rounds instead of as a false ratio.
    alone: list[list[float]] = []
    served: list[tuple[list[float], dict[str, list[float]]]] = []
    for _ in range(args.rounds):
        alone.append(run_alone(args.jobs, args.replicas))
        served.append(run_with_api(args.jobs, args.replicas, args.rps))
    report(args.jobs, args.replicas, args.rps, alone, served)


if __name__ == "__main__":
    main()
