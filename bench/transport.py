"""Runtime transport latency: a progress report and a barrier, over the net (the controller's
relay on 127.0.0.1) against files (the baseline), measured in the same run.

    .venv/bin/python bench/transport.py [--reports 2000] [--members 4] [--barriers 50]

- report: one progress record delivered to the controller's state dir: an O_APPEND write
  (file) against a request to the relay answered after it appended (net: the client's send,
  the relay's append, the answer; what the background sender pays per batch). The relay runs
  in a process of its own, as in the controller.
- barrier: `members` processes meet in `barriers` consecutive rounds' barriers (both phases,
  `barrier.meet`), in a FileStore (file) against the relay's store (net); time per barrier.
Ratios are net / file. The machine is shared (2 cores): read the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch.distributed  # noqa: F401  (imported before the fork: one import for all)

from perdure.backends.relay.server import Relay
from perdure.runtime.elastic.barrier import meet
from perdure.runtime.elastic.rendezvous import Member, Round
from perdure.runtime.transport import FileTransport, NetTransport, Transport, from_env

JOB, SECRET = "bench-job", "b" * 64


def names(n: int) -> list[str]:
    return [f"worker-{i}" for i in range(n)]


def transport(kind: str, state: Path, replica: str, address: str) -> Transport:
    launch = state / "launches" / f"{JOB}.1.{replica}.0"
    launch.mkdir(parents=True, exist_ok=True)
    if kind == "file":
        return FileTransport(rdzv_dir=state / "rdzv" / JOB, report_dir=launch)
    return from_env({"PERDURE_TRANSPORT": "net", "PERDURE_CONTROL_ADDR": address,
                     "PERDURE_JOB_SECRET": SECRET, "PERDURE_JOB_ID": JOB,
                     "PERDURE_REPLICA": replica, "PERDURE_LAUNCH_ID": f"{JOB}.1.{replica}.0",
                     "PERDURE_RDZV": "1"})


def report_latencies(t: Transport, n: int) -> list[float]:
    line = '{"kind":"steps","t":0,"t0":0,"first":1,"last":1,"seconds":0.01,"count":1}'
    out = []
    for i in range(n):
        began = time.perf_counter()
        if isinstance(t, NetTransport):  # delivered = the relay answered after appending
            t.client.call("progress", {"seq": i + 1, "lines": [line]},
                          deadline=time.monotonic() + 10)
        else:
            t.append_progress([line])
        out.append(time.perf_counter() - began)
    return out


def member(kind: str, state: str, address: str, replica: str, members: list[str],
           barriers: int, out: Any) -> None:
    t = transport(kind, Path(state), replica, address)
    began = time.perf_counter()
    for n in range(barriers):
        rnd = Round(JOB, 1, n, "bench", 0.0, tuple(Member(r, i, "a")
                                                   for i, r in enumerate(members)))
        formed, _ = meet(t, rnd, replica, deadline=time.monotonic() + 60,
                         superseded=lambda: False)
        assert formed.status == "ok", formed
    out.put(time.perf_counter() - began)


def barrier_time(kind: str, state: Path, address: str, n_members: int, barriers: int) -> float:
    ctx = mp.get_context("fork")
    out: Any = ctx.Queue()
    members = names(n_members)
    procs = [ctx.Process(target=member, args=(kind, str(state), address, r, members, barriers,
                                              out)) for r in members]
    for p in procs:
        p.start()
    walls = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    return max(walls) / barriers


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def serve(state: Path, members: int) -> None:
    """The controller's side: a relay in this process until stdin closes."""
    relay = Relay.start(state, "127.0.0.1", secret_of=lambda job: SECRET,
                        replicas_of=lambda job: names(max(members, 1)))
    print(relay.address, flush=True)
    sys.stdin.read()
    relay.close()


class _Relay:
    def __init__(self, state: Path, members: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(state), "--members", str(members)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.address = self.proc.stdout.readline().strip()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reports", type=int, default=2000)
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--barriers", type=int, default=50)
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return serve(a.serve, a.members)
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-transport-"))
    relay = _Relay(root / "net", a.members)
    try:
        print(f"transport latency (load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores)")
        rep = {k: report_latencies(transport(k, root / k, "worker-0", relay.address), a.reports)
               for k in ("file", "net")}
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            f, n = pct(rep["file"], q), pct(rep["net"], q)
            print(f"  progress report {label}: file {f * 1e6:8.1f} us   net {n * 1e6:8.1f} us"
                  f"   net/file {n / f:6.2f}x")
        bar = {k: barrier_time(k, root / k, relay.address, a.members, a.barriers)
               for k in ("file", "net")}
        print(f"  barrier ({a.members} processes, both phases): file {bar['file'] * 1e3:7.2f} ms"
              f"   net {bar['net'] * 1e3:7.2f} ms   net/file {bar['net'] / bar['file']:6.2f}x")
        print(f"  (mean report: file {statistics.mean(rep['file']) * 1e6:.1f} us, "
              f"net {statistics.mean(rep['net']) * 1e6:.1f} us)")
    finally:
        relay.close()


if __name__ == "__main__":
    sys.exit(main())
