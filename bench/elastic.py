"""Elastic benchmark: recovery from a replica SIGKILL, 4 ranks on gloo, side by side.

    flock /tmp/perdure-bench.lock .venv/bin/python bench/elastic.py [--hidden 2048] [--reps 1]

Goodput under repeated faults and node loss -> hot-swap are in elastic_faults.py.

The time from the SIGKILL of one replica (of 4, DDP, an MLP whose weights and SGD momentum
take 2 x 4 x (hidden^2 + 512 hidden) bytes: 40 MiB at hidden=2048) to the next training step
completed by the group, for:

- perdure resize: survivors stay alive, rebuild the group at world size 3 and step on; the
  replacement joins later at a step boundary (time to grow back is printed too);
- perdure pause: survivors stay alive and wait for the replacement, which restores its state
  from its peer's memory (Snapshotter) at the same world size;
- whole-group restart from a disk checkpoint: every process is killed and started again (as
  a supervisor without elastic support does, at once), each rank restores perdure's latest
  checkpoint (Checkpointer, disk), then steps;
- torchrun --max-restarts 1 (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, MACHINE-NOTES: without it
  restarted workers cannot reconnect), restoring the same disk checkpoint: the baseline.

The controller is played by this script for the perdure scenarios (round.json written with
the controller's own `publish_round` right after the kill, the replacement launched at once),
so its reaction time (one tick, 20 ms) is not included. Also measured in the same run: one
rank's state restored from its own memory, from its peer's memory (over TCP, as a replacement
does) and from the disk checkpoint (page cache warm, and cold after fadvise DONTNEED).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from elastic_common import (
    AFTER,
    JOB,
    JOB_SECRET,
    NODES,
    WARM,
    WORLD,
    all_reached,
    free_port,
    launch,
    perdure_env,
    publish,
    records,
    stop,
    wait_until,
)

os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).resolve()


# ---- the training process -------------------------------------------------------------------


def build(hidden: int) -> tuple[Any, Any]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                          nn.ReLU(), nn.Linear(hidden, 256))
    return model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)


class StepLog:
    def __init__(self, out: Path, name: str) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.file = (out / f"{name}-{os.getpid()}.jsonl").open("a", buffering=1)
        self.name = name

    def write(self, **rec: Any) -> None:
        self.file.write(json.dumps({"t": time.time(), "pid": os.getpid(), "name": self.name,
                                    **rec}) + "\n")


def train_steps(ddp: Any, opt: Any, state: dict[str, Any], log: StepLog, world: int,
                after_step: Any, until: int | None = None) -> None:
    """Train (random batches seeded by the step) until `until` steps, or until killed."""
    import torch

    while until is None or state["step"] < until:
        g = torch.Generator().manual_seed(state["step"])
        x = torch.randn(16, 256, generator=g)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        state["step"] += 1
        log.write(ev="step", step=state["step"], world=world)
        after_step()


def elastic_worker(args: dict[str, Any]) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from perdure.runtime.elastic import Manager, Snapshotter

    manager = Manager()
    log = StepLog(Path(args["out"]), manager.replica)
    model, opt = build(args["hidden"])
    state: dict[str, Any] = {"model": model, "optim": opt, "step": 0}
    snap = Snapshotter()

    @manager.elastic_retry(poll_interval=0.01, timeout=120)
    def train() -> None:
        began = time.perf_counter()
        if args["restore"] == "snapshot" and manager.round > 0:
            info = snap.load(state)
            source = info.source if info else "none"
        else:
            source = "live" if manager.sync_state(state) is not None else "none"
        log.write(ev="restore", source=source, seconds=time.perf_counter() - began,
                  step=state["step"], world=manager.world_size, round=manager.round)
        ddp = DDP(model) if manager.world_size > 1 else model

        def after_step() -> None:
            if state["step"] % args["every"] == 0:
                snap.save(state["step"], state)
            manager.maybe_reconfigure()

        train_steps(ddp, opt, state, log, manager.world_size, after_step)

    train()


def static_worker(args: dict[str, Any]) -> None:
    """A plain DDP worker (torchrun's contract) that restores perdure's disk checkpoint."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from perdure.runtime import Checkpointer

    dist.init_process_group("gloo")
    log = StepLog(Path(args["out"]), f"rank{dist.get_rank()}")
    model, opt = build(args["hidden"])
    state: dict[str, Any] = {"model": model, "optim": opt, "step": 0}
    ckpt = Checkpointer(args["ckpt"], keep=2)
    began = time.perf_counter()
    found = ckpt.restore_latest(state)
    log.write(ev="restore", source="disk" if found is not None else "none",
              seconds=time.perf_counter() - began, step=state["step"], world=WORLD)
    ddp = DDP(model)

    def after_step() -> None:
        if state["step"] % args["every"] == 0:
            ckpt.save(state["step"], state)  # async: blocks only for the staging copy

    train_steps(ddp, opt, state, log, dist.get_world_size(), after_step)


def restore_worker(args: dict[str, Any]) -> None:
    """One rank of 4: the same state restored from own memory, a peer's memory and disk."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from perdure.runtime import Checkpointer, Snapshotter
    from perdure.runtime.elastic import codec, holder
    from perdure.runtime.elastic.snapshot import _targets
    from perdure.runtime.elastic.state import apply
    from perdure.runtime.transport import current as current_transport

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model, opt = build(args["hidden"])
    state: dict[str, Any] = {"model": model, "optim": opt, "step": 0}
    log = StepLog(Path(args["out"]), f"rank{rank}")
    train_steps(DDP(model), opt, state, log, WORLD, lambda: None, until=3)
    snap = Snapshotter(replicate=True)
    dist.barrier()  # every holder is registered before anyone sends
    snap.save(3, state)
    snap.join()
    ckpt = Checkpointer(args["ckpt"], keep=1, async_save=False)
    ckpt.save(3, state)
    dist.barrier()
    out: dict[str, float] = {}
    t = time.perf_counter()
    snap.load(state)
    out["own memory"] = time.perf_counter() - t
    dist.barrier()
    peer = snap.latest.peer if snap.latest else None
    doc = next(d for d in current_transport().holders() if d["replica"] == peer)
    addr = holder.HolderAddress(str(doc["replica"]), str(doc["host"]), int(doc["port"]))
    t = time.perf_counter()
    into = _targets(state)  # what a replacement does: straight into its parameters
    apply(state, holder.fetch(addr, snap.replica, 3,
                              lambda read_into, size: codec.read(read_into, size, into),
                              secret=os.environ["PERDURE_JOB_SECRET"]))
    out["peer memory"] = time.perf_counter() - t
    dist.barrier()
    t = time.perf_counter()
    ckpt.restore_latest(state)
    out["disk, page cache warm"] = time.perf_counter() - t
    dist.barrier()
    if rank == 0:
        drop_cache(Path(args["ckpt"]))
    dist.barrier()
    t = time.perf_counter()
    ckpt.restore_latest(state)
    out["disk, cold"] = time.perf_counter() - t
    log.write(ev="restore-times", times=out, nbytes=snap.latest.nbytes if snap.latest else 0)
    dist.barrier()
    snap.close()
    dist.destroy_process_group()
    os._exit(0)


def drop_cache(root: Path) -> None:
    from pagecache import drop_cache as evict

    evict([p for p in root.rglob("*") if p.is_file()])


# ---- the driver -------------------------------------------------------------------------------


def standby() -> subprocess.Popen[bytes]:
    """A warm standby interpreter as perdure's local backend keeps (torch imported): given a
    launch on stdin it runs this script's worker without a cold start."""
    from perdure.backends.node.standby import STANDBY_CODE

    ready_r, ready_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", STANDBY_CODE], stdin=subprocess.PIPE,
                            pass_fds=(ready_w, 3), preexec_fn=lambda: os.dup2(ready_w, 3),
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    os.close(ready_w)
    os.read(ready_r, 1)  # it has imported torch
    os.close(ready_r)
    return proc


def launch_warm(proc: subprocess.Popen[bytes], kind: str, args: dict[str, Any],
                env: dict[str, str], logs: Path, name: str) -> subprocess.Popen[bytes]:
    assert proc.stdin is not None
    log = str(logs / f"{name}.log")
    proc.stdin.write(json.dumps({
        "target": ["script", str(HERE)], "args": [kind, json.dumps(args)],
        "env": {**os.environ, "OMP_NUM_THREADS": "1", **env}, "cwd": str(HERE.parent),
        "stdout": log, "stderr": log}).encode())
    proc.stdin.close()
    return proc


def kill_workers(out: Path) -> None:
    """SIGKILL every worker that logged into `out` and still runs (torchrun starts its workers
    in sessions of their own: killing torchrun's group leaves them running)."""
    for pid in {r["pid"] for r in records(out)}:
        with contextlib.suppress(OSError):
            if str(HERE) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                os.kill(pid, signal.SIGKILL)


def first_step_after(out: Path, t: float, pids: set[int] | None = None,
                     world: int | None = None) -> float | None:
    times = [r["t"] for r in records(out, "step") if r["t"] > t
             and (pids is None or r["pid"] in pids) and (world is None or r["world"] == world)]
    return min(times) if times else None


def run_elastic(mode: str, base: dict[str, Any], tmp: Path, warm: bool = False
                ) -> dict[str, Any]:
    """perdure: kill worker-2; resize (go on with 3, grow back) or pause (wait, peer restore).

    warm: the replacement starts in a warm standby (as perdure's local backend does), not cold.
    """
    out, state_dir = tmp / "out", tmp / "state"
    rdzv = state_dir / "rdzv" / JOB
    args = {**base, "out": str(out), "restore": "snapshot" if mode == "pause" else "sync"}
    members = list(NODES)
    publish(state_dir, 0, members, "admitted")
    procs = {r: launch("elastic", args, perdure_env(rdzv, r, 0, members, mode), tmp, r)
             for r in members}
    spare = standby() if warm else None
    try:
        wait_until("warm-up", lambda: all_reached(out, set(NODES), WARM))
        killed = time.time()
        os.kill(procs["worker-2"].pid, signal.SIGKILL)
        procs["worker-2"].wait()
        survivors = [m for m in members if m != "worker-2"]
        if mode == "resize":
            publish(state_dir, 1, survivors, "shrink 4 -> 3: worker-2 exited 137 (SIGKILL)")
            procs["new"] = launch("elastic", args, perdure_env(rdzv, "worker-2", 1, survivors,
                                                                mode), tmp, "worker-2")
            publish(state_dir, 2, members, "grow 3 -> 4: worker-2 is up")
        else:
            publish(state_dir, 1, members, "pause at world size 4: worker-2 exited")
            env = perdure_env(rdzv, "worker-2", 1, members, mode)
            procs["new"] = (launch_warm(spare, "elastic", args, env, tmp, "worker-2") if spare
                            else launch("elastic", args, env, tmp, "worker-2"))
        new_pid = procs["new"].pid

        def regrouped() -> float | None:
            restores = [r["t"] for r in records(out, "restore") if r["t"] > killed
                        and r["pid"] != new_pid]
            return first_step_after(out, min(restores)) if restores else None

        wait_until("the next step", lambda: regrouped() is not None)
        wait_until("the replacement", lambda: first_step_after(out, killed, {new_pid}) is not None)
        back = first_step_after(out, killed, {new_pid})
        assert back is not None
        wait_until("more steps", lambda: _steps_after(out, back) >= AFTER)
        recovery = regrouped()
        assert recovery is not None
        joined = [r for r in records(out, "restore") if r["pid"] == new_pid]
        regroup = min(r["t"] for r in records(out, "restore") if r["t"] > killed
                      and r["pid"] != new_pid)
        return {"recovery_s": recovery - killed, "back_to_4_s": back - killed,
                "regrouped_s": regroup - killed, "step_s": step_time(out, killed),
                "replacement_restore": joined[0] if joined else None,
                "world_after": records_world(out, killed)}
    finally:
        stop([*procs.values(), *([spare] if spare else [])])


def step_time(out: Path, before: float) -> float:
    """Median time between a rank's consecutive steps before `before` (the group of 4)."""
    gaps: list[float] = []
    for name in {r["name"] for r in records(out, "step")}:
        ts = sorted(r["t"] for r in records(out, "step") if r["name"] == name and r["t"] < before)
        gaps += [b - a for a, b in itertools.pairwise(ts[2:])]  # after the first steps
    return float(statistics.median(gaps)) if gaps else float("nan")


def _steps_after(out: Path, t: float) -> int:
    return len({r["step"] for r in records(out, "step") if r["t"] > t})


def records_world(out: Path, t: float) -> list[int]:
    seen: list[int] = []
    for r in sorted(records(out, "step"), key=lambda r: r["t"]):
        if r["t"] > t and (not seen or seen[-1] != r["world"]):
            seen.append(r["world"])
    return seen


def static_env(rank: int, port: int) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": str(WORLD), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def run_restart(base: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Without elastic support: kill all, start all, restore the disk checkpoint, step."""
    out = tmp / "out"
    args = {**base, "out": str(out), "ckpt": str(tmp / "ckpt")}
    port = free_port()
    procs = [launch("static", args, static_env(r, port), tmp, f"rank{r}") for r in range(WORLD)]
    try:
        wait_until("warm-up", lambda: all_reached(out, {f"rank{r}" for r in range(WORLD)},
                                                  WARM + base["every"]))
        killed = time.time()
        os.kill(procs[2].pid, signal.SIGKILL)
        stop(procs)  # the supervisor's reaction, at once: the best case for a restart
        port = free_port()
        procs = [launch("static", args, static_env(r, port), tmp, f"rank{r}")
                 for r in range(WORLD)]
        pids = {p.pid for p in procs}
        wait_until("the next step", lambda: first_step_after(out, killed, pids) is not None)
        t = first_step_after(out, killed, pids)
        assert t is not None
        restores = [r for r in records(out, "restore") if r["pid"] in pids]
        return {"recovery_s": t - killed, "step_s": step_time(out, killed),
                "restore_s": statistics.median(r["seconds"] for r in restores),
                "restored_step": restores[0]["step"]}
    finally:
        stop(procs)


def run_torchrun(base: dict[str, Any], tmp: Path) -> dict[str, Any]:
    out = tmp / "out"
    args = {**base, "out": str(out), "ckpt": str(tmp / "ckpt")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD),
           "--max-restarts", "1", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--monitor-interval", "0.1",
           str(HERE), "static", json.dumps(args)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    with (tmp / "torchrun.log").open("ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        names = {f"rank{r}" for r in range(WORLD)}
        wait_until("warm-up", lambda: all_reached(out, names, WARM + base["every"]))
        victim = next(r["pid"] for r in records(out, "step") if r["name"] == "rank2")
        old = {r["pid"] for r in records(out, "step")}
        killed = time.time()
        os.kill(victim, signal.SIGKILL)

        def new_step() -> float | None:
            times = [r["t"] for r in records(out, "step") if r["pid"] not in old]
            return min(times) if times else None

        wait_until("the next step", lambda: new_step() is not None)
        t = new_step()
        assert t is not None
        restores = [r for r in records(out, "restore") if r["pid"] not in old]
        return {"recovery_s": t - killed, "step_s": step_time(out, killed),
                "restore_s": statistics.median(r["seconds"] for r in restores)}
    finally:
        stop([proc])
        kill_workers(out)


def run_restore(base: dict[str, Any], tmp: Path) -> dict[str, Any]:
    out = tmp / "out"
    args = {**base, "out": str(out), "ckpt": str(tmp / "ckpt")}
    port = free_port()
    procs = [launch("restore", args, {**static_env(r, port),
                                      "PERDURE_RDZV_DIR": str(tmp / "rdzv"),
                                      "PERDURE_REPLICA": f"worker-{r}",
                                      "PERDURE_JOB_SECRET": JOB_SECRET,
                                      "PERDURE_NODE": NODES[f"worker-{r}"]}, tmp, f"rank{r}")
             for r in range(WORLD)]
    try:
        wait_until("restore timings", lambda: len(records(out, "restore-times")) == WORLD)
    finally:
        stop(procs)
    recs = records(out, "restore-times")
    names = recs[0]["times"].keys()
    return {"nbytes": recs[0]["nbytes"],
            "seconds": {n: statistics.median(r["times"][n] for r in recs) for n in names}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--every", type=int, default=5, help="snapshot / checkpoint every N steps")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--only", default="", help="comma-separated scenarios (default: all)")
    p.add_argument("--faults", type=int, default=2,
                   help="faults per goodput phase (1 per 30 s, then 1 per 60 s)")
    opts = p.parse_args()
    base = {"hidden": opts.hidden, "every": opts.every}
    import elastic_faults as ef

    phases = [("1 fault / 30 s", 30.0, opts.faults), ("1 fault / 60 s", 60.0, opts.faults)]
    scenarios = {"torchrun": run_torchrun, "restart": run_restart,
                 "resize": lambda b, t: run_elastic("resize", b, t),
                 "pause": lambda b, t: run_elastic("pause", b, t),
                 "pause-warm": lambda b, t: run_elastic("pause", b, t, warm=True),
                 "restore": run_restore,
                 "goodput": lambda b, t: ef.run_goodput(b, t, 30.0, phases),
                 "hotswap": lambda b, t: ef.run_hotswap(t)}
    chosen = [n for n in opts.only.split(",") if n] or list(scenarios)
    results: dict[str, list[dict[str, Any]]] = {}
    for rep in range(opts.reps):
        for name in chosen:
            fn = scenarios[name]
            tmp = Path(tempfile.mkdtemp(prefix=f"perdure-bench-elastic-{name}-"))
            try:
                res = fn(base, tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            print(f"rep {rep + 1} {name}: {json.dumps(res)}", flush=True)
            results.setdefault(name, []).append(res)
    report(results)


def report(results: dict[str, list[dict[str, Any]]]) -> None:
    def med(name: str, key: str) -> float:
        return float(statistics.median(r[key] for r in results[name]))

    if "restore" in results:
        report_restore(results["restore"])
    if "goodput" in results:
        report_goodput(results["goodput"])
    if "hotswap" in results:
        hs = results["hotswap"]
        print(f"\nnode loss -> high-priority job RUNNING again via hot-swap (real controller, "
              f"median of {len(hs)}): {statistics.median(r['to_running_s'] for r in hs):.2f} s; "
              f"its replicas' code running: "
              f"{statistics.median(r['to_user_code_s'] for r in hs):.2f} s")
    if not {"torchrun", "restart", "resize", "pause", "pause-warm"} <= set(results):
        return

    base = med("torchrun", "recovery_s")
    print(f"\nSIGKILL of 1 of {WORLD} ranks -> next step completed by the group "
          f"(median of {len(results['torchrun'])}):")
    rows = [("torchrun --max-restarts 1 (baseline)", base),
            ("whole-group restart + disk checkpoint", med("restart", "recovery_s")),
            ("perdure pause: wait for replacement + peer snapshot", med("pause", "recovery_s")),
            ("perdure pause, replacement from a warm standby", med("pause-warm", "recovery_s")),
            ("perdure resize: survivors go on at world size 3", med("resize", "recovery_s")),
            ("perdure resize: back to world size 4", med("resize", "back_to_4_s"))]
    for label, value in rows:
        print(f"  {label:<55} {value:7.2f} s  x{value / base:.2f}")
    print(f"  (a training step of the group of 4: {med('torchrun', 'step_s'):.2f} s; "
          f"resize: group rebuilt after {med('resize', 'regrouped_s'):.2f} s; "
          f"pause: after {med('pause', 'regrouped_s'):.2f} s)")


def report_goodput(runs: list[dict[str, Any]]) -> None:
    r = runs[-1]
    each = ", ".join(f"{x:.0f}" for x in r["baseline_each"])
    print(f"\ngoodput, resize mode, SIGKILL of one of {WORLD} ranks per period (fault-free "
          f"baseline {r['baseline_samples_per_s']:.0f} samples/s (before, after: {each}), "
          f"step {r['step_s']:.3f} s):")
    for label, v in r.items():
        if isinstance(v, dict):
            print(f"  {label:<16} {v['faults']} faults in {v['seconds']:.0f} s: goodput (work) "
                  f"{v['goodput_work']:.3f}, goodput (time) {v['goodput_time']:.3f}")


def report_restore(runs: list[dict[str, Any]]) -> None:
    names = list(runs[0]["seconds"])
    seconds = {n: statistics.median(r["seconds"][n] for r in runs) for n in names}
    disk = seconds["disk, page cache warm"]
    print(f"\nrestore one rank's state ({runs[0]['nbytes'] / 2**20:.0f} MiB), median of ranks "
          f"and of {len(runs)} runs:")
    for label, value in seconds.items():
        print(f"  {label:<25} {value * 1000:8.1f} ms  x{value / disk:.2f} of disk (warm)")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] in ("elastic", "static", "restore"):
        worker_args = json.loads(sys.argv[2])
        {"elastic": elastic_worker, "static": static_worker,
         "restore": restore_worker}[sys.argv[1]](worker_args)
    else:
        main()
