"""Recovery benchmark: the same 4-replica DDP job under perdure and under `torchrun
--max-restarts`, side by side in one run, each with a replica SIGKILLed every `--kill-every`
seconds for `--duration` seconds.

    flock /tmp/perdure-bench.lock .venv/bin/python bench/recovery.py [--duration 300]
        [--kill-every 30] [--systems torchrun,perdure,perdure-warm2,perdure-cold]
        [--workload mlp|gpt]

The job (`--workload mlp`, the default) is examples/ddp_mlp (an MLP, DDP on gloo, 4 ranks,
OMP_NUM_THREADS=1):
- torchrun: this file's `worker` mode, the same model and data with a synchronous stock DCP
  checkpoint every `--every` steps (a LATEST file names the newest complete one), restarted by
  `torchrun --standalone --max-restarts` with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (without
  it restarted workers cannot rendezvous on this torch; see MACHINE-NOTES);
- perdure: examples/ddp_mlp/train.py under `perdure controller` on two virtual nodes of two
  slots, with perdure's async checkpoint every `--every` steps (checkpoint.every_steps), the
  local backend's default warm pool ("auto": grows to the 4 replicas restarted together),
  `perdure-warm2` with PERDURE_WARM_POOL=2 (half the group starts cold) and `perdure-cold`
  with PERDURE_WARM_POOL=0 (every replica re-imports torch, as under torchrun).
`--workload gpt` runs examples/gpt instead (a ~14 M-parameter GPT, sequence 256, FSDP2 on
gloo, token shards through perdure's cache, 2 replicas): under perdure its train.py as users
run it; under torchrun this file's worker with the same model, FSDP2 sharding and token
shards (read straight from disk), saved with a synchronous stock DCP checkpoint every
`--every` steps and no sleep added to the step.

Rank 0 of either appends one JSON line per finished step (pid, step, end time, seconds). Kills
go to ranks 1, 2, 3, 0, 1, ... (gpt: 1, 0, 1, ...) in turn, by SIGKILL of the replica's
process. Figures:
- recovery: from a SIGKILL to the first step finished by a process started after it;
- goodput: the step seconds of the last completion of every step number (what the final
  model keeps) over `--duration` (startup, restores, replays and saves are the rest); for
  perdure `perdure describe` shows its own goodput account, printed beside it.
Every figure is also printed as a ratio to torchrun's, measured in the same run.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_mlp"
GPT = ROOT / "examples" / "gpt"
PERDURE = [sys.executable, "-m", "perdure.cli.main"]
REPLICAS = {"mlp": 4, "gpt": 2}  # the GPT's two replicas fill this 2-core machine
SAMPLES, BATCH = 1000, 16


@dataclass
class Outcome:
    """What one system did in its window."""

    name: str
    duration: float
    kills: list[float] = field(default_factory=list)  # wall times of the SIGKILLs sent
    skipped: int = 0  # kills not sent: the replica was not running (still recovering)
    records: list[dict[str, Any]] = field(default_factory=list)  # rank 0's steps
    marks: list[dict[str, Any]] = field(default_factory=list)  # every rank's start-up phases
    describe_goodput: float | None = None
    describe: dict[str, Any] = field(default_factory=dict)  # perdure's goodput account
    started: float = 0.0  # wall time the window began

    def recoveries(self) -> list[float | None]:
        """Seconds from each kill to the first step of a process started after it."""
        out: list[float | None] = []
        for i, kill in enumerate(self.kills):
            before = {r["pid"] for r in self.records if r["t"] <= kill}
            until = self.kills[i + 1] if i + 1 < len(self.kills) else float("inf")
            after = [r["t"] for r in self.records
                     if kill < r["t"] < until and r["pid"] not in before]
            out.append(min(after) - kill if after else None)
        return out

    def productive(self) -> float:
        last: dict[int, float] = {}
        for r in sorted(self.records, key=lambda r: r["t"]):
            last[r["step"]] = r["s"]
        return sum(last.values())

    def goodput_after_start(self) -> float | None:
        """Goodput from the first step on: what faults cost, without the job's first start."""
        if not self.records:
            return None
        first = min(r["t"] - r["s"] for r in self.records)
        return self.productive() / (self.duration - (first - self.started))

    def steady_step(self) -> float:
        return statistics.median(r["s"] for r in self.records) if self.records else 0.0


# ---- torchrun worker (runs under torchrun) ------------------------------------------------

def worker(args: argparse.Namespace) -> None:
    """The baseline: DDP with a synchronous DCP checkpoint every N steps, resumed from LATEST."""
    if args.workload == "gpt":
        import recovery_gpt

        recovery_gpt.worker(args)
        return
    import dcp_baseline
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, str(EXAMPLE))
    import train as ex

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = ex.build_model(64)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3)
    data = ex.Samples(SAMPLES, seed=1)
    ckpt = Path(args.ckpt)
    step = dcp_baseline.restore(model, opt, ckpt)
    timeline = ex.Timeline(args.timeline) if rank == 0 else None
    while True:
        began = time.perf_counter()
        lo = ((step * world + rank) * BATCH) % (SAMPLES - BATCH)
        loss = nn.functional.mse_loss(ddp(data.x[lo:lo + BATCH]), data.y[lo:lo + BATCH])
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        time.sleep(args.step_time)
        step += 1
        if timeline is not None:
            timeline.step(step, time.perf_counter() - began)
        if step % args.every == 0:
            dcp_baseline.save(model, opt, ckpt, step, rank)


# ---- driving the systems --------------------------------------------------------------------

def read_timeline(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(steps, start-up marks) from a timeline file."""
    out = []
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return [r for r in out if "step" in r], [r for r in out if "mark" in r]


def _torchrun_worker_pid(agent: psutil.Process, rank: int) -> int | None:
    for child in agent.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.environ().get("RANK") == str(rank) and "worker" in child.cmdline():
                return child.pid
    return None


def _run_window(out: Outcome, kill_every: float, kill: Any, replicas: int) -> None:
    """Send a SIGKILL every `kill_every` s until the window ends (ranks 1, 2, 3, 0, ...)."""
    t0 = out.started = time.time()
    n = 1
    while True:
        due = t0 + n * kill_every
        if due >= t0 + out.duration:
            break
        time.sleep(max(0.0, due - time.time()))
        if kill(n % replicas):
            out.kills.append(time.time())
        else:
            out.skipped += 1
        n += 1
    time.sleep(max(0.0, t0 + out.duration - time.time()))


def run_torchrun(root: Path, args: argparse.Namespace) -> Outcome:
    ckpt, timeline = root / "ckpt", root / "timeline.jsonl"
    ckpt.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           f"--nproc-per-node={REPLICAS[args.workload]}", "--max-restarts=1000",
           str(Path(__file__)), "worker", "--ckpt", str(ckpt), "--timeline", str(timeline),
           "--every", str(args.every), "--step-time", str(args.step_time), "--workload",
           args.workload]
    if args.workload == "gpt":
        cmd += ["--data", str(root.parent / "gpt-data")]
    out = Outcome("torchrun --max-restarts", args.duration)
    with (root / "torchrun.log").open("wb") as log:
        agent = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        proc = psutil.Process(agent.pid)

        def kill(rank: int) -> bool:
            pid = _torchrun_worker_pid(proc, rank)
            if pid is None:
                return False
            os.kill(pid, signal.SIGKILL)
            return True

        try:
            _run_window(out, args.kill_every, kill, REPLICAS[args.workload])
        finally:
            _kill_tree(proc)
            agent.wait()
    out.records, out.marks = read_timeline(timeline)
    return out


def _kill_tree(root: psutil.Process) -> None:
    """SIGKILL a process and every descendant (torchrun's workers lead sessions of their own,
    so killing the agent's group would leave them training)."""
    with contextlib.suppress(psutil.Error):
        family = [*root.children(recursive=True), root]
        for proc in family:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(family, timeout=10)


def _perdure_spec(root: Path, args: argparse.Namespace, timeline: Path) -> Path:
    command = [
        "python", str(EXAMPLE / "train.py"), "--epochs", "100000", "--step-time",
        str(args.step_time), "--log-every", "1000000", "--no-ledger", "--timeline",
        str(timeline)]
    if args.workload == "gpt":
        command = ["python", str(GPT / "train.py"), "--steps", "100000000", "--data",
                   str(root.parent / "gpt-data"), "--cache", str(root / "cache"), "--timeline",
                   str(timeline), "--out", str(root / "out")]
    spec = {
        "name": "recovery",
        "pools": [{"name": "worker", "replicas": REPLICAS[args.workload], "command": command}],
        "restart": {"max_replica_restarts": 1000, "max_job_retries": 100},
        "checkpoint": {"dir": str(root / "ckpt"), "every_steps": args.every},
    }
    if args.workload == "gpt":
        spec["env"] = {"OMP_NUM_THREADS": "1"}
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    cluster = {"backend": "local", "nodes": [{"name": "a", "slots": 2}, {"name": "b", "slots": 2}],
               "queues": [{"name": "default"}]}
    (root / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    return path


def _current_launch(state: Path, replica: str) -> str | None:
    found = []
    for d in (state / "launches").glob(f"recovery-*.*.{replica}.*"):
        _, attempt, _, n = d.name.rsplit(".", 3)
        found.append((int(attempt), int(n), d.name))
    return max(found)[2] if found else None


def _describe(base: list[str], job: str) -> dict[str, Any]:
    out = subprocess.run([*base, "describe", job, "--json"], check=True, text=True,
                         capture_output=True).stdout
    doc: dict[str, Any] = json.loads(out)
    return doc


def run_perdure(root: Path, args: argparse.Namespace, warm_pool: int | None) -> Outcome:
    from perdure.backends.node.replicas import signal_replica

    state, timeline = root / "state", root / "timeline.jsonl"
    root.mkdir(parents=True, exist_ok=True)
    spec = _perdure_spec(root, args, timeline)
    base = [*PERDURE, "--state-dir", str(state)]
    cluster = ["--cluster", str(root / "cluster.yaml")]
    env = dict(os.environ)
    if warm_pool is not None:
        env["PERDURE_WARM_POOL"] = str(warm_pool)
    name = f"perdure (warm pool {warm_pool if warm_pool is not None else 'default'})"
    out = Outcome(name, args.duration)
    job = subprocess.run([*base, "submit", str(spec), *cluster], check=True, text=True,
                         capture_output=True).stdout.strip()
    with (root / "controller.log").open("wb") as log:
        ctl = subprocess.Popen([*base, "controller", *cluster], env=env, stdout=log,
                               stderr=subprocess.STDOUT)

        def kill(rank: int) -> bool:
            launch = _current_launch(state, f"worker-{rank}")
            if launch is None:
                return False
            try:
                signal_replica(state, launch, signal.SIGKILL)
            except ProcessLookupError:
                return False
            return True

        try:
            _run_window(out, args.kill_every, kill, REPLICAS[args.workload])
            out.describe = _describe(base, job)["goodput"]
            out.describe_goodput = out.describe["goodput"]
            subprocess.run([*base, "cancel", job], check=True, capture_output=True)
            deadline = time.time() + 60
            while time.time() < deadline and _describe(base, job)["state"] != "CANCELLED":
                time.sleep(0.5)
        finally:
            ctl.kill()
            ctl.wait()
            for d in (state / "launches").glob("recovery-*"):  # whatever the cancel left
                if not (d / "exit.json").exists():
                    with contextlib.suppress(ProcessLookupError, OSError, ValueError):
                        signal_replica(state, d.name, signal.SIGKILL)
    out.records, out.marks = read_timeline(timeline)
    (root / "kills.json").write_text(json.dumps(out.kills))
    return out


# ---- report ---------------------------------------------------------------------------------

def _fmt(x: float | None) -> str:
    return "   -  " if x is None else f"{x:6.2f}"


def report(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    base = outcomes[0] if outcomes[0].name.startswith("torchrun") else None
    base_rec = [r for r in base.recoveries() if r is not None] if base else []
    base_med = statistics.median(base_rec) if base_rec else None
    base_gp = base.productive() / base.duration if base else None
    extra = f"step time {args.step_time} s + compute" if args.workload == "mlp" else \
        "examples/gpt, 2 replicas, FSDP2"
    print(f"\n{args.duration:.0f} s per system, a replica SIGKILLed every {args.kill_every:.0f} s,"
          f" checkpoint every {args.every} steps, {extra}")
    print(f"{'system':<28} {'kills':>5} {'rec. median':>11} {'min':>6} {'max':>6} "
          f"{'x torchrun':>10} {'goodput':>8} {'x torchrun':>10} {'describe':>8} "
          f"{'after 1st':>9} {'step s':>7}")
    for o in outcomes:
        rec = o.recoveries()
        done = [r for r in rec if r is not None]
        med = statistics.median(done) if done else None
        gp = o.productive() / o.duration
        ratio = med / base_med if med is not None and base_med else None
        missed = f" ({len(rec) - len(done)} not recovered before the next kill)" \
            if len(done) < len(rec) else ""
        skipped = f" ({o.skipped} kills skipped: replica not running)" if o.skipped else ""
        print(f"{o.name:<28} {len(o.kills):>5} {_fmt(med):>11} {_fmt(min(done, default=None))} "
              f"{_fmt(max(done, default=None))} {_fmt(ratio):>10} {gp:8.3f} "
              f"{_fmt(gp / base_gp if base_gp else None):>10} {_fmt(o.describe_goodput):>8} "
              f"{_fmt(o.goodput_after_start()):>9} {o.steady_step():7.3f}{missed}{skipped}")
    for o in outcomes[1:] if base else outcomes:
        done = [r for r in o.recoveries() if r is not None]
        med = statistics.median(done) if done else None
        met = med is not None and base_med is not None and med <= 0.05 * base_med
        print(f"goal, {o.name}: recovery <= 0.05x torchrun's: {'met' if met else 'NOT met'}; "
              f"goodput >= 0.95: {'met' if o.productive() / o.duration >= 0.95 else 'NOT met'}")


def report_phases(outcome: Outcome, root: Path) -> None:
    """Where each group restart's time went, and what each fault cost by perdure's account."""
    import recovery_phases

    rows = recovery_phases.analyse(root / "state", outcome.kills, outcome.marks,
                                   outcome.records)
    print(f"\n{outcome.name}: a group restart, phase by phase")
    print("\n".join(recovery_phases.report(rows)))
    bad = outcome.describe.get("badput_seconds", {})
    if bad and outcome.kills:
        n = len(outcome.kills)
        parts = ", ".join(f"{k} {v:.2f} s ({v / n:.2f}/kill)" for k, v in bad.items() if v)
        print(f"describe: goodput {outcome.describe_goodput:.3f}; badput {parts}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode")
    w = sub.add_parser("worker", help="the torchrun baseline's training script")
    w.add_argument("--ckpt", required=True)
    w.add_argument("--timeline", required=True)
    for q in (p, w):
        q.add_argument("--every", type=int, default=20, help="checkpoint every N steps")
        q.add_argument("--step-time", type=float, default=0.02,
                       help="extra seconds per step (mlp only)")
        q.add_argument("--workload", choices=sorted(REPLICAS), default="mlp",
                       help="mlp: examples/ddp_mlp, 4 replicas; gpt: examples/gpt (FSDP2), 2")
    w.add_argument("--data", help="the GPT's token shards")
    p.add_argument("--duration", type=float, default=300.0, help="seconds per system")
    p.add_argument("--kill-every", type=float, default=30.0)
    p.add_argument("--systems", default="torchrun,perdure,perdure-warm2,perdure-cold")
    p.add_argument("--json", help="also write each system's figures to this file "
                                  "(perdure sim calibrate and bench/sim_validate.py read it)")
    p.add_argument("--phases", action="store_true",
                   help="also print where each perdure group restart's time went (profile); "
                        "then --systems may leave torchrun out")
    args = p.parse_args(argv)
    if args.mode == "worker":
        worker(args)
        return
    print(f"$ {' '.join(sys.argv)}  (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    systems = {"torchrun": lambda r: run_torchrun(r, args),
               "perdure": lambda r: run_perdure(r, args, None),
               "perdure-warm2": lambda r: run_perdure(r, args, 2),
               "perdure-cold": lambda r: run_perdure(r, args, 0)}
    chosen = args.systems.split(",")
    if chosen[0] != "torchrun" and not args.phases:
        raise SystemExit("--systems must start with torchrun: every figure is a ratio to it "
                         "(only a --phases profile may leave it out)")
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-recovery-"))
    if args.workload == "gpt":
        import recovery_gpt

        recovery_gpt.prepare(root / "gpt-data")
    outcomes = []
    for name in chosen:
        if name not in systems:
            raise SystemExit(f"--systems: unknown {name!r}; use {', '.join(systems)}")
        print(f"running {name} for {args.duration:.0f} s ...", flush=True)
        began = time.time()
        outcomes.append(systems[name](root / name))
        print(f"  done in {time.time() - began:.0f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    report(outcomes, args)
    if args.phases:
        for name, outcome in zip(chosen, outcomes, strict=True):
            if name.startswith("perdure"):
                report_phases(outcome, root / name)
    if args.json:
        write_json(Path(args.json), chosen, outcomes, root, args.phases, args.workload)
    print(f"logs and timelines under {root}")


def write_json(path: Path, names: list[str], outcomes: list[Outcome], root: Path,
               phases: bool, workload: str = "mlp") -> None:
    import recovery_phases

    doc: dict[str, Any] = {}
    for name, o in zip(names, outcomes, strict=True):
        done = [r for r in o.recoveries() if r is not None]
        doc[name] = {
            "workload": workload, "duration": o.duration, "kills": len(o.kills), "recoveries": done,
            "recovery_median": statistics.median(done) if done else None,
            "goodput": o.productive() / o.duration, "step_seconds": o.steady_step(),
            # the job's first start: the window's start to its first step's start
            "first_step_seconds": min(r["t"] - r["s"] for r in o.records) - o.started
            if o.records else None,
            "describe_goodput": o.describe_goodput, "describe": o.describe,
            "phases": recovery_phases.analyse(root / name / "state", o.kills, o.marks,
                                              o.records)
            if phases and name.startswith("perdure") else [],
        }
    path.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
