"""Slurm benchmark: the same 4-rank DDP job under perdure on Slurm and under the recipe TorchX
and submitit users run, side by side in one run, on a real Slurm cluster of namespace hosts.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/slurm.py [--window 180]
        [--interval 30] [--systems requeue,perdure]

Needs root, and Slurm and munge from apt (`apt-get install slurm-wlm munge`). One cluster from
tests/integration/slurm/cluster.py: head (slurmctld, the login node both systems are driven
from), and hosts a, b and c (2 CPUs each in slurm.conf), with slurm.conf's measured settings
(SlurmdTimeout 10 s, requeue delay cred_expire + 1 = 11 s).
- requeue: `sbatch --requeue --nodes=2` of a script that runs `srun --kill-on-bad-exit=1
  torchrun --nnodes=2 --nproc-per-node=2` (c10d rendezvous on the first node, no torchrun
  restarts) over bench/recovery.py's `worker` (the same model, data and step time; a
  synchronous stock DCP checkpoint every `--every` steps, resumed from the newest), and calls
  `scontrol requeue` on the job when that step fails: what TorchX's Slurm scheduler and
  submitit's requeue recipes do.
- perdure: examples/ddp_mlp/train.py (async checkpoints every `--every` steps, node-local
  snapshots) under `perdure controller` on head with a `backend: slurm` cluster file naming
  a, b and c (2 slots each): one allocation per attempt, warm restarts in it.

Rank 0 of either appends one line per finished step to a timeline (bench/recovery.py's); once
the first step is done, a training process is SIGKILLed every `--interval` s for `--window` s
(ranks 1, 2, 3, 0, ... in turn), then host b dies (every process of its namespace). Figures:
recovery (a kill -> the first step of a process started after it, median), goodput over the
window from its first step (bench/recovery.py's definition: the last completion of every step
over the time), and the node loss: the death -> perdure's first event acting on it, and -> the
next step done by either. Every figure is also given as a ratio to the requeue recipe's.
"""

from __future__ import annotations

import argparse
import contextlib
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
from typing import Any

import psutil
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.append(str(HERE))
sys.path.append(str(ROOT / "tests" / "integration" / "slurm"))
sys.path.append(str(ROOT))  # tests.helpers.nshosts, which the cluster imports
import recovery  # noqa: E402  (bench/recovery.py: the baseline's worker, the timeline figures)
from cluster import SlurmCluster  # noqa: E402

EXAMPLE = ROOT / "examples" / "ddp_mlp"
PY = sys.executable
BASELINE = """#!/bin/bash
#SBATCH --job-name=requeue-baseline --nodes=2 --ntasks-per-node=1 --cpus-per-task=2
#SBATCH --requeue --open-mode=append --output={root}/baseline.log --chdir={root}
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)
export OMP_NUM_THREADS=1 PYTHONPATH={pythonpath}
srun --kill-on-bad-exit=1 bash -c '{py} -m torch.distributed.run --nnodes=2 \\
  --nproc-per-node=2 --max-restarts=0 --rdzv-backend=c10d --rdzv-endpoint='$head':29500 \\
  --rdzv-id=$SLURM_JOB_ID {bench}/recovery.py worker --ckpt {root}/ckpt \\
  --timeline {root}/timeline.jsonl --every {every} --step-time {step_time}'
rc=$?
[ $rc -ne 0 ] && scontrol requeue "$SLURM_JOB_ID"
exit $rc
"""


def rank_pid(rank: int, match: Callable[[dict[str, str]], bool]) -> int | None:
    """The live training process of `rank` (found by its environment)."""
    for proc in psutil.process_iter(["environ", "status"]):
        with contextlib.suppress(psutil.Error):
            env = proc.info["environ"] or {}
            if env.get("RANK") == str(rank) and proc.info["status"] != "zombie" and match(env):
                return int(proc.pid)
    return None


def replica_pid(nodes: Path, rank: int) -> int | None:
    """The process of perdure's replica worker-<rank> now: its newest launch on any node
    (a warm-started replica's /proc environ is its standby's, so it is found by its record)."""
    found = []
    for status in nodes.glob(f"*/launches/*.worker-{rank}.*/status.json"):
        if not (status.parent / "exit.json").exists():
            _, attempt, _, n = status.parent.name.rsplit(".", 3)
            found.append((int(attempt), int(n), status))
    if not found:
        return None
    return int(json.loads(max(found)[2].read_text())["pid"])


def in_window(out: recovery.Outcome, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps done inside the window (the figures' time base)."""
    end = out.started + out.duration
    return [r for r in records if out.started <= r["t"] - r["s"] and r["t"] <= end]


def run_window(out: recovery.Outcome, interval: float, kill: Callable[[int], bool]) -> None:
    t0 = out.started = time.time()
    n = 1
    while (due := t0 + n * interval) < t0 + out.duration:
        time.sleep(max(0.0, due - time.time()))
        if kill(n % recovery.REPLICAS["mlp"]):
            out.kills.append(time.time())
        else:  # that rank was not running (still recovering)
            out.skipped += 1
        n += 1
    time.sleep(max(0.0, t0 + out.duration - time.time()))


def wait_first_step(timeline: Path, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if recovery.read_timeline(timeline)[0]:
            return
        time.sleep(0.5)
    raise SystemExit(f"no step in {timeout:.0f}s; see {timeline.parent}")


def host_loss(cluster: SlurmCluster, timeline: Path, settle: float = 120) -> dict[str, Any]:
    """Kill host b; when the next step of a new process came."""
    before = {r["pid"] for r in recovery.read_timeline(timeline)[0]}
    killed = time.time()
    cluster.kill("b")
    deadline = killed + settle
    while time.time() < deadline:
        steps = [r for r in recovery.read_timeline(timeline)[0]
                 if r["t"] > killed and r["pid"] not in before]
        if steps:
            return {"killed": killed, "next_step": min(r["t"] for r in steps) - killed}
        time.sleep(0.3)
    return {"killed": killed, "next_step": None}


def run_requeue(cluster: SlurmCluster, root: Path, args: argparse.Namespace
                ) -> tuple[recovery.Outcome, dict[str, Any]]:
    (root / "ckpt").mkdir(parents=True)
    script = root / "baseline.sh"
    script.write_text(BASELINE.format(root=root, py=PY, bench=HERE, every=args.every,
                                      step_time=args.step_time,
                                      pythonpath=os.environ.get("PYTHONPATH", "")))
    job = cluster.run("sbatch", "--parsable", str(script)).strip()
    out = recovery.Outcome("sbatch --requeue + srun torchrun", args.window)
    timeline = root / "timeline.jsonl"
    try:
        wait_first_step(timeline)
        run_window(out, args.interval, lambda r: _kill(rank_pid(
            r, lambda env: "TORCHELASTIC_RUN_ID" in env and "PERDURE_JOB_ID" not in env)))
        loss = host_loss(cluster, timeline)
    finally:
        cluster.run("scancel", job)
    records, out.marks = recovery.read_timeline(timeline)
    out.records = in_window(out, records)
    return out, loss


def run_perdure(cluster: SlurmCluster, root: Path, args: argparse.Namespace
                ) -> tuple[recovery.Outcome, dict[str, Any]]:
    timeline, state = root / "timeline.jsonl", root / "state"
    spec = {"name": "bench", "env": {"OMP_NUM_THREADS": "1"},
            "pools": [{"name": "worker", "replicas": recovery.REPLICAS["mlp"], "command": [
                "python", str(EXAMPLE / "train.py"), "--epochs", "100000", "--step-time",
                str(args.step_time), "--log-every", "1000000", "--no-ledger", "--timeline",
                str(timeline)]}],
            "restart": {"max_replica_restarts": 1000, "max_job_retries": 100},
            "checkpoint": {"dir": str(root / "ckpt"), "every_steps": args.every}}
    slurm = {"backend": "slurm", "slurm": {"partition": "main", "shared_dirs": [str(root)]},
             "nodes": [{"name": n, "slots": 2} for n in ("a", "b", "c")]}
    root.mkdir(parents=True)
    (root / "job.yaml").write_text(yaml.safe_dump(spec))
    (root / "slurm.yaml").write_text(yaml.safe_dump(slurm))
    base = cluster.on_head(PY, "-m", "perdure.cli.main", "--state-dir", str(state))
    with (root / "controller.log").open("wb") as log:
        ctl = subprocess.Popen([*base, "controller", "--cluster", str(root / "slurm.yaml")],
                               stdout=log, stderr=subprocess.STDOUT, env=cluster.env)
    out = recovery.Outcome("perdure on Slurm", args.window)
    try:
        subprocess.run([*base, "submit", str(root / "job.yaml"), "--cluster",
                        str(root / "slurm.yaml")], check=True,
                       capture_output=True, env=cluster.env)
        wait_first_step(timeline)
        nodes = Path(cluster.env["TMPDIR"]) / "perdure-slurm"
        run_window(out, args.interval, lambda r: _kill(replica_pid(nodes, r)))
        loss = host_loss(cluster, timeline)
        events = json.loads(subprocess.run([*base, "describe", "bench", "--json"], check=True,
                                           capture_output=True, text=True,
                                           env=cluster.env).stdout)["events"]
        acted = [e["time"] for e in events if e["time"] >= loss["killed"]
                 and ("node lost" in e["message"] or "node b" in e["message"])]
        loss["acted"] = min(acted) - loss["killed"] if acted else None
    finally:
        ctl.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            ctl.wait(timeout=60)
        cluster.run("scancel", "--me")
    records, out.marks = recovery.read_timeline(timeline)
    out.records = in_window(out, records)
    return out, loss


def _kill(pid: int | None) -> bool:
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
        return True
    return False


def _f(x: float | None, unit: str = "s") -> str:
    return "-" if x is None else f"{x:.2f}{unit}"


def report(results: list[tuple[recovery.Outcome, dict[str, Any]]]) -> None:
    base_rec = statistics.median([r for r in results[0][0].recoveries() if r is not None]
                                 or [float("nan")])
    base_good = results[0][0].goodput_after_start()
    print(f"{'system':34} {'kills':>5} {'recovery med':>12} {'ratio':>6} {'goodput':>8} "
          f"{'ratio':>6} {'node loss acted':>15} {'next step':>9}")
    for out, loss in results:
        recs = [r for r in out.recoveries() if r is not None]
        rec = statistics.median(recs) if recs else None
        good = out.goodput_after_start()
        print(f"{out.name:34} {len(out.kills):5d} {_f(rec):>12} "
              f"{_f(rec / base_rec if rec else None, 'x'):>6} {_f(good, ''):>8} "
              f"{_f(good / base_good if good and base_good else None, 'x'):>6} "
              f"{_f(loss.get('acted')):>15} {_f(loss.get('next_step')):>9}")
        print(f"  recoveries: {', '.join(_f(r) for r in out.recoveries())}; "
              f"steady step {out.steady_step():.3f}s")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--window", type=float, default=180.0, help="seconds of kills per system")
    p.add_argument("--interval", type=float, default=30.0, help="seconds between kills")
    p.add_argument("--every", type=int, default=20, help="checkpoint every N steps")
    p.add_argument("--step-time", type=float, default=0.02, help="extra seconds per step")
    p.add_argument("--systems", default="requeue,perdure")
    args = p.parse_args(argv)
    print(f"$ {' '.join(sys.argv)}  (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    systems = {"requeue": run_requeue, "perdure": run_perdure}
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-slurm-"))
    cluster = SlurmCluster()
    cluster.up()
    results = []
    try:
        for name in args.systems.split(","):
            print(f"running {name} ...", flush=True)
            results.append(systems[name](cluster, root / name, args))
            cluster.start("b")  # the host comes back for the next system
            cluster.wait_idle()
    finally:
        cluster.down()
    report(results)
    print(f"logs and timelines under {root}")


if __name__ == "__main__":
    main()
