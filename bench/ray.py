"""Ray benchmark: the same 4-replica DDP job under perdure on Ray and under Ray Train
(`TorchTrainer`), side by side in one run, on a real Ray cluster of network-namespace hosts.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/ray.py [--kills 5] [--interval 30]
        [--quick] [--systems raytrain,perdure] [--json FILE]

Needs root (network namespaces) and the `bench-ray` extra (`pip install -e '.[bench-ray]'`:
Ray Train's dependencies). Each system gets a fresh cluster from tests/integration/ray/hosts.py:
a head (0 CPUs: it holds only Ray's and perdure's control actors), host a (4 slots) and host b
(2 slots), so that a can hold the whole job when b is gone and both systems start spread over
a and b (2 + 2):
- perdure: examples/ddp_mlp/train.py (DDP on gloo, async checkpoint every `--every` steps,
  node-local snapshots) submitted with a `backend: ray` cluster file (nodes discovered from the
  `perdure_node_a: 4`, `perdure_node_b: 2` resources), `perdure controller` in the root
  namespace;
- Ray Train: the same model, data, batch and step time in `TorchTrainer` (gloo) with
  `ScalingConfig(num_workers=4, resources_per_worker={"CPU": 1}, placement_strategy="SPREAD")`
  on the same 4 + 2 CPUs, `FailureConfig(max_failures=-1)`, a checkpoint every `--every` steps
  through `ray.train.report(..., checkpoint_upload_mode=ASYNC)` into `storage_path`, resumed
  from `ray.train.get_checkpoint()`; the driver runs in the root namespace like perdure's
  controller.
Both run for the same number of steps (more than the window reaches); both are stopped after it.

Every rank of either appends a start mark (pid, rank) and rank 0 one line per finished step to
a timeline file (the hosts share this machine's filesystem: only the benchmark's measurement
uses that, not the jobs). Once the first step is done, a training process is SIGKILLed every
`--interval` s, `--kills` times (ranks 1, 2, 3, 0, ... in turn, the same for both), then host b
dies (every process in its namespace SIGKILLed). Figures, each also as a ratio to Ray Train's:
- recovery: a kill -> the first step finished by a process started after it (median, spread);
- goodput: bench/recovery.py's definition, printed with the figures;
- node loss: host b's death -> every rank of the replacement group started (its first line of
  training code ran), and -> the next step done; for perdure also its first event after the
  death and its first event that acts on node b being gone (its detection of the loss);
- where a recovery's time goes: from the kill until every rank of the new group passed each
  start-up mark of its training code (median over the kills).
Each system's timeline and schedule stay under the printed folder, with its controller's or
driver's log (Ray's own logs go with the hosts).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# As a script, this file's folder comes first on sys.path, where this file would shadow the
# `ray` package: look there last (bench/recovery.py is still found, after site-packages).
if sys.path and Path(sys.path[0] or ".").resolve() == HERE:
    sys.path.pop(0)
sys.path.append(str(HERE))

import argparse  # noqa: E402
import ast  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import psutil  # noqa: E402
import yaml  # noqa: E402

ROOT = HERE.parent
EXAMPLE = ROOT / "examples" / "ddp_mlp"
sys.path.append(str(ROOT / "tests" / "integration" / "ray"))
import recovery  # noqa: E402  (bench/recovery.py: the measuring and printing helpers)
from hosts import IFNAME, Hosts, make_hosts  # noqa: E402

# perdure's slots (best fit: 2 replicas on b, 2 on a) and Ray's CPUs (Ray Train's SPREAD: 2 and
# 2 only when both hosts have as many); host a holds the whole job once b is gone, in both.
SLOTS, CPUS = {"a": 4, "b": 2}, {"a": 4, "b": 4}
REPLICAS, SAMPLES, BATCH = recovery.REPLICAS["mlp"], recovery.SAMPLES, recovery.BATCH
HIDDEN, STEPS = 64, 10**7  # the same model as examples/ddp_mlp; more steps than any window
GOODPUT = ("goodput = the step seconds of the last completion of every step number (what the "
           "final model keeps) / the window's wall time; the window opens at the first step "
           "done and closes an interval after the last kill (bench/recovery.py's definition)")


@dataclass
class HostLoss:
    """What host b's death cost: times in seconds after the kill (None: never seen)."""

    killed_at: float  # wall time
    on_b: list[int]  # ranks whose process ran on b when it died
    first_started: float | None = None  # the first process of the replacement group
    all_started: float | None = None  # every rank of the replacement group
    next_step: float | None = None  # the first step done by a process started after the kill
    reacted: float | None = None  # perdure: its first event after the kill
    reacted_by: str = ""
    detected: float | None = None  # perdure: its first event that acts on node b's loss
    detected_by: str = ""


@dataclass
class Result:
    outcome: recovery.Outcome
    host: HostLoss | None = None


# ---- Ray Train (its driver runs as `bench/ray.py raytrain-driver`) -----------------------------

def train_loop(config: dict[str, Any]) -> None:
    """Ray Train's worker: the ddp_mlp model and data (bench/recovery.py's baseline loop), a
    checkpoint every N steps through `ray.train.report`, resumed from `get_checkpoint()`."""
    import ray.train
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    fd = os.open(config["timeline"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def line(**fields: Any) -> None:  # train.py's Timeline lines, one write each
        os.write(fd, (json.dumps({"pid": os.getpid(), **fields, "t": time.time()}) + "\n"
                      ).encode())

    line(rank=str(rank), mark="script")  # Ray Train set the process group up before this
    ex: dict[str, Any] = {}
    exec(config["model_code"], ex)
    torch.manual_seed(0)
    model = ex["build_model"](HIDDEN)
    ddp = DDP(model)
    line(rank=str(rank), mark="model")
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3)
    data = ex["Samples"](SAMPLES, seed=1)
    step = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = torch.load(Path(d) / "state.pt", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        step = int(state["step"])
    line(rank=str(rank), mark="restore")
    while step < config["steps"]:
        began = time.perf_counter()
        lo = ((step * world + rank) * BATCH) % (SAMPLES - BATCH)
        loss = nn.functional.mse_loss(ddp(data.x[lo:lo + BATCH]), data.y[lo:lo + BATCH])
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(config["step_time"])
        step += 1
        if rank == 0:
            line(step=step, s=time.perf_counter() - began)
        if step % config["every"] == 0:
            report_checkpoint(step, model, opt, rank)


def example_model_code() -> str:
    """examples/ddp_mlp/train.py's model and data (FEATURES, Samples, build_model), without
    its imports: a Ray Train worker that imported train.py would also import perdure's runtime
    (~0.75 s per process), which is no part of Ray Train's recovery."""
    tree = ast.parse((EXAMPLE / "train.py").read_text())
    keep: list[ast.stmt] = [
        node for node in tree.body
        if getattr(node, "name", None) in ("Samples", "build_model")
        or (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "FEATURES")]
    head = ("from __future__ import annotations\nimport torch\nfrom torch import nn\n"
            "from torch.utils.data import Dataset\n")
    return head + ast.unparse(ast.Module(keep, type_ignores=[]))


def report_checkpoint(step: int, model: Any, opt: Any, rank: int) -> None:
    """Rank 0 saves the (replicated) state and hands it to Ray Train, which uploads it to
    storage_path in the background (ASYNC: its fastest mode); every rank must report."""
    import ray.train
    import torch

    if rank != 0:
        ray.train.report({"step": step}, checkpoint=None)
        return
    local = Path(tempfile.mkdtemp(prefix="raybench-ckpt-"))
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step},
               local / "state.pt")
    ray.train.report({"step": step}, checkpoint=ray.train.Checkpoint.from_directory(local),
                     checkpoint_upload_mode=ray.train.CheckpointUploadMode.ASYNC)


def raytrain_driver(args: argparse.Namespace) -> None:
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    # gloo binds where the host name resolves (127.0.0.1 on these hosts) unless told the
    # interface: one name on every host, as a Ray Train user on a uniform cluster would set it
    env = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": IFNAME}
    ray.init(address=args.address, log_to_driver=False, runtime_env={"env_vars": env})
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"model_code": example_model_code(), "timeline": args.timeline,
                           "steps": STEPS, "every": args.every, "step_time": args.step_time},
        # SPREAD: 2 workers on a and 2 on b, as perdure places them; a holds all 4 after b dies
        scaling_config=ScalingConfig(num_workers=REPLICAS, resources_per_worker={"CPU": 1},
                                     placement_strategy="SPREAD"),
        run_config=RunConfig(name="raybench", storage_path=args.storage,
                             failure_config=FailureConfig(max_failures=-1),
                             checkpoint_config=CheckpointConfig(num_to_keep=3)))
    trainer.fit()


def start_raytrain(hosts: Hosts, root: Path, args: argparse.Namespace
                   ) -> tuple[subprocess.Popen[bytes], Callable[[], None]]:
    # On the head host, as Ray drivers run: a driver outside every Ray host (the root namespace)
    # owns objects (the training function) at an address the workers cannot reach.
    cmd = ["ip", "netns", "exec", hosts.hosts["head"].netns, sys.executable,
           str(Path(__file__)), "raytrain-driver", "--address",
           hosts.head_address, "--storage", str(root / "storage"), "--timeline",
           str(root / "timeline.jsonl"), "--every", str(args.every), "--step-time",
           str(args.step_time)]
    with (root / "driver.log").open("wb") as log:
        driver = subprocess.Popen(cmd, env=hosts.env(), stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)

    def stop() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()

    return driver, stop


# ---- perdure on Ray --------------------------------------------------------------------------

def start_perdure(hosts: Hosts, root: Path, args: argparse.Namespace
                  ) -> tuple[subprocess.Popen[bytes], Callable[[], None]]:
    cluster = {"backend": "ray", "queues": [{"name": "default"}],  # nodes discovered: a 4, b 2
               "ray": {"address": hosts.head_address, "namespace": f"raybench{os.getpid()}",
                       "shared_dirs": [str(root)]}}
    (root / "ray.yaml").write_text(yaml.safe_dump(cluster))
    spec = {"name": "raybench", "pools": [{
        "name": "worker", "replicas": REPLICAS, "env": {"OMP_NUM_THREADS": "1"},
        "command": ["python", str(EXAMPLE / "train.py"), "--epochs", str(STEPS),
                    "--step-time", str(args.step_time), "--log-every", "1000000",
                    "--no-ledger", "--timeline", str(root / "timeline.jsonl")]}],
        "restart": {"max_replica_restarts": 1000, "max_job_retries": 100},
        "checkpoint": {"dir": str(root / "ckpt"), "every_steps": args.every}}
    (root / "job.yaml").write_text(yaml.safe_dump(spec))
    base = [*recovery.PERDURE, "--state-dir", str(root / "state")]
    on_ray = ["--cluster", str(root / "ray.yaml")]
    with (root / "controller.log").open("wb") as log:
        ctl = subprocess.Popen([*base, "controller", *on_ray], env=hosts.env(), stdout=log,
                               stderr=subprocess.STDOUT)
    job = subprocess.run([*base, "submit", str(root / "job.yaml"), *on_ray], check=True,
                         capture_output=True, text=True, env=hosts.env(), timeout=120).stdout
    (root / "job-id").write_text(job.strip())

    def stop() -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            subprocess.run([*base, "cancel", job.strip()], capture_output=True, timeout=30,
                           env=hosts.env())
        ctl.send_signal(signal.SIGINT)
        try:
            ctl.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ctl.kill()
            ctl.wait()

    return ctl, stop


def perdure_events(root: Path, hosts: Hosts) -> list[dict[str, Any]]:
    base = [*recovery.PERDURE, "--state-dir", str(root / "state")]
    job = (root / "job-id").read_text()
    out = subprocess.run([*base, "describe", job, "--json"], capture_output=True,
                         text=True, timeout=60, env=hosts.env(), check=True).stdout
    events: list[dict[str, Any]] = json.loads(out)["events"]
    return events


# ---- the schedule, the same for both ---------------------------------------------------------

def started_pids(timeline: Path) -> dict[int, int]:
    """rank -> the pid of its newest training process (its latest start mark)."""
    marks = sorted(recovery.read_timeline(timeline)[1], key=lambda m: m["t"])
    return {int(m["rank"]): int(m["pid"]) for m in marks if m["mark"] == "script"}


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_rank(timeline: Path) -> Callable[[int], bool]:
    def kill(rank: int) -> bool:
        pid = started_pids(timeline).get(rank)
        if pid is None or not _alive(pid):
            return False  # still recovering from the last kill: recovery.py counts it skipped
        os.kill(pid, signal.SIGKILL)
        return True
    return kill


def wait_for(what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes],
             timeout: float, log: Path) -> None:
    deadline = time.time() + timeout
    while not ready():
        if proc.poll() is not None or time.time() > deadline:
            why = f"exited {proc.returncode}" if proc.returncode is not None else "timed out"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise SystemExit(f"{what}: {why} after {timeout:.0f} s; {log}:\n{tail}")
        time.sleep(0.2)


def lose_host_b(hosts: Hosts, timeline: Path, proc: subprocess.Popen[bytes], log: Path,
                timeout: float) -> HostLoss:
    """Kill every process of host b; wait for the first step of a process started after it."""
    on_b = set(hosts.hosts["b"].pids())
    before = {r["pid"] for r in recovery.read_timeline(timeline)[0]}
    killed_at = time.time()
    loss = HostLoss(killed_at, sorted(r for r, p in started_pids(timeline).items() if p in on_b))
    hosts.kill("b")

    def stepped() -> bool:
        steps = recovery.read_timeline(timeline)[0]
        return any(r["t"] > killed_at and r["pid"] not in before for r in steps)

    with contextlib.suppress(SystemExit):  # a system that never recovers is reported as such
        wait_for("a step after host b's death", stepped, proc, timeout, log)
    steps, marks = recovery.read_timeline(timeline)
    after = [r["t"] for r in steps if r["t"] > killed_at and r["pid"] not in before]
    loss.next_step = min(after) - killed_at if after else None
    first: dict[str, float] = {}
    for m in sorted(marks, key=lambda m: m["t"]):
        if m["mark"] == "script" and m["t"] > killed_at:
            first.setdefault(m["rank"], m["t"] - killed_at)
    loss.first_started = min(first.values(), default=None)
    loss.all_started = max(first.values()) if len(first) == REPLICAS else None
    return loss


def run_system(name: str, start: Any, root: Path, args: argparse.Namespace) -> Result:
    """A fresh cluster; the job; the kills once it steps; host b's death; everything torn down."""
    root.mkdir(parents=True)
    timeline = root / "timeline.jsonl"
    log = root / ("controller.log" if name == "perdure" else "driver.log")
    hosts = make_hosts(SLOTS, head_cpus=0, cpus=CPUS)
    result = Result(recovery.Outcome(name, (args.kills + 1) * args.interval))
    try:
        proc, stop = start(hosts, root, args)
        try:
            wait_for(f"{name}: the first step", lambda: bool(recovery.read_timeline(timeline)[0]),
                     proc, args.start_timeout, log)
            recovery._run_window(result.outcome, args.interval, kill_rank(timeline), REPLICAS)
            result.host = lose_host_b(hosts, timeline, proc, log, args.host_timeout)
            if name == "perdure":
                note_detection(result.host, perdure_events(root, hosts))
        finally:
            stop()
    finally:
        keep_ray_logs(hosts, root / "ray-logs")
        hosts.close()
    # recoveries may end after the window (the last kill's, until the host dies); goodput
    # counts only the window's steps (window_goodput)
    steps, result.outcome.marks = recovery.read_timeline(timeline)
    until = result.host.killed_at if result.host else float("inf")
    result.outcome.records = [r for r in steps if r["t"] <= until]
    o = result.outcome
    (root / "schedule.json").write_text(json.dumps({  # with timeline.jsonl: enough to re-check
        "started": o.started, "duration": o.duration, "kills": o.kills, "skipped": o.skipped,
        "host": vars(result.host) if result.host else None}))
    return result


def keep_ray_logs(hosts: Hosts, into: Path) -> None:
    """Each host's Ray logs (Ray Train's controller log is the head's logs/train): the hosts'
    folders go with them."""
    for host in hosts.hosts.values():
        with contextlib.suppress(OSError, shutil.Error):
            shutil.copytree(host.temp_dir / "session_latest" / "logs", into / host.name,
                            symlinks=False, ignore_dangling_symlinks=True, dirs_exist_ok=True)


def window_goodput(o: recovery.Outcome) -> float:
    window = recovery.Outcome(o.name, o.duration, started=o.started, records=[
        r for r in o.records if r["t"] <= o.started + o.duration])
    return window.productive() / o.duration


def phases(o: recovery.Outcome) -> list[tuple[str, float]]:
    """Median over the kills of the seconds from the kill until every rank of the new group
    had reached each of its start-up marks (in the order the training code makes them)."""
    marks = sorted(o.marks, key=lambda m: m["t"])
    names = list(dict.fromkeys(m["mark"] for m in marks))
    seen: dict[str, list[float]] = {n: [] for n in names}
    last = max((r["t"] for r in o.records), default=float("inf"))
    for kill, until in zip(o.kills, [*o.kills[1:], last], strict=True):
        for name in names:
            first: dict[str, float] = {}
            for m in marks:
                if m["mark"] == name and kill < m["t"] < until:
                    first.setdefault(m["rank"], m["t"])
            if len(first) == REPLICAS:
                seen[name].append(max(first.values()) - kill)
    return [(n, statistics.median(v)) for n, v in seen.items() if v]


def note_detection(loss: HostLoss, events: list[dict[str, Any]]) -> None:
    """perdure's own account of the loss: its first event after the kill (often a survivor's
    lost-peer exit: gloo notices a dead peer in milliseconds), and its first event that acts on
    node b being gone ("node lost" on a replica's exit, or a launch that node b failed)."""
    after = [e for e in events if e["time"] > loss.killed_at]
    if after:
        loss.reacted, loss.reacted_by = after[0]["time"] - loss.killed_at, after[0]["message"]
    for event in after:
        if re.search(r"node lost|node b\b", event["message"]):
            loss.detected, loss.detected_by = event["time"] - loss.killed_at, event["message"]
            return


# ---- report ----------------------------------------------------------------------------------

def _median(xs: list[float | None]) -> float | None:
    done = [x for x in xs if x is not None]
    return statistics.median(done) if done else None


def _ratio(x: float | None, base: float | None) -> float | None:
    return x / base if x is not None and base else None


def report(results: list[Result], args: argparse.Namespace) -> None:
    fmt = recovery._fmt
    base = results[0]
    base_rec = _median(base.outcome.recoveries())
    base_gp = window_goodput(base.outcome)
    print(f"\nwindow {base.outcome.duration:.0f} s per system: a training process SIGKILLed every "
          f"{args.interval:.0f} s ({args.kills} kills, ranks 1, 2, 3, 0, ...), then host b "
          f"killed; checkpoint every {args.every} steps, step time {args.step_time} s + compute")
    print(GOODPUT)
    print(f"{'system':<10} {'kills':>5} {'rec. median':>11} {'min':>6} {'max':>6} "
          f"{'x RayTrain':>10} {'goodput':>8} {'x RayTrain':>10} {'step s':>7}")
    for res in results:
        o = res.outcome
        rec = o.recoveries()
        done = [r for r in rec if r is not None]
        med, gp = _median(rec), window_goodput(o)
        missed = f" ({len(rec) - len(done)} not recovered before the next kill)" \
            if len(done) < len(rec) else ""
        skipped = f" ({o.skipped} kills skipped: process not running)" if o.skipped else ""
        print(f"{o.name:<10} {len(o.kills):>5} {fmt(med):>11} {fmt(min(done, default=None))} "
              f"{fmt(max(done, default=None))} {fmt(_ratio(med, base_rec)):>10} {gp:8.3f} "
              f"{fmt(_ratio(gp, base_gp)):>10} {o.steady_step():7.3f}{missed}{skipped}")
    print("where a recovery's time goes (median over the kills): seconds after the kill until "
          "every rank of the new group passed each mark of its training code")
    for res in results:
        parts = [f"{n} {t:.2f}" for n, t in phases(res.outcome)]
        med = _median(res.outcome.recoveries())
        print(f"  {res.outcome.name:<10} {', '.join(parts)}; first step {fmt(med).strip()}")
    report_host_loss(results)
    report_goals(results, base_rec)


def report_host_loss(results: list[Result]) -> None:
    fmt = recovery._fmt
    base = results[0].host
    print("\nhost b killed (every process in its namespace): seconds after the kill until")
    print(f"{'system':<10} {'ranks on b':>10} {'1st started':>11} {'all 4 started':>13} "
          f"{'x RayTrain':>10} {'next step':>9} {'x RayTrain':>10}")
    for res in results:
        h = res.host
        if h is None:
            print(f"{res.outcome.name:<10} (no host loss: the run stopped before it)")
            continue
        print(f"{res.outcome.name:<10} {','.join(map(str, h.on_b)) or '-':>10} "
              f"{fmt(h.first_started):>11} {fmt(h.all_started):>13} "
              f"{fmt(_ratio(h.all_started, base and base.all_started)):>10} "
              f"{fmt(h.next_step):>9} {fmt(_ratio(h.next_step, base and base.next_step)):>10}")
        if h.reacted is not None:
            print(f"  {res.outcome.name}: first event {h.reacted:.2f} s ({h.reacted_by[:90]})")
        if h.detected is not None:
            print(f"  {res.outcome.name}: node b's loss acted on {h.detected:.2f} s "
                  f"({h.detected_by[:90]})")


def report_goals(results: list[Result], base_rec: float | None) -> None:
    for res in results[1:]:
        o, h = res.outcome, res.host
        med = _median(o.recoveries())
        ratio = _ratio(med, base_rec)
        gp = window_goodput(o)
        detected = h.detected if h is not None else None
        print(f"goals, {o.name}: recovery <= 0.3x Ray Train's: "
              f"{'met' if ratio is not None and ratio <= 0.3 else 'NOT met'} "
              f"({fmt_x(ratio)}); goodput >= 0.9: {'met' if gp >= 0.9 else 'NOT met'} "
              f"({gp:.3f}); node loss detected within 5 s: "
              f"{'met' if detected is not None and detected <= 5 else 'NOT met'} "
              f"({'never' if detected is None else f'{detected:.2f} s'})")


def fmt_x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} cores"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode")
    d = sub.add_parser("raytrain-driver", help="Ray Train's driver (started by the benchmark)")
    d.add_argument("--address", required=True)
    d.add_argument("--storage", required=True)
    d.add_argument("--timeline", required=True)
    for q in (p, d):
        q.add_argument("--every", type=int, default=20, help="checkpoint every N steps")
        q.add_argument("--step-time", type=float, default=0.02, help="extra seconds per step")
    p.add_argument("--kills", type=int, default=5, help="worker SIGKILLs before host b dies")
    p.add_argument("--interval", type=float, default=30.0, help="seconds between kills")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 1 kill after 25 s, then the host (~4 minutes in all)")
    p.add_argument("--systems", default="raytrain,perdure",
                   help="raytrain first: every figure is a ratio to it")
    p.add_argument("--start-timeout", type=float, default=240.0)
    p.add_argument("--host-timeout", type=float, default=150.0)
    p.add_argument("--json", help="also write each system's figures to this file "
                                  "(bench/sim_validate.py --scenario ray reads it)")
    args = p.parse_args(argv)
    if args.mode is None and args.quick:
        args.kills, args.interval = 1, 25.0
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.mode == "raytrain-driver":
        raytrain_driver(args)
        return
    chosen = args.systems.split(",")
    systems = {"raytrain": start_raytrain, "perdure": start_perdure}
    if chosen[0] != "raytrain" or not set(chosen) <= set(systems):
        raise SystemExit(f"--systems: {args.systems!r}; use raytrain first, then perdure")
    # SIGTERM (a timeout, a CI stop) unwinds like Ctrl-C: every host is torn down on the way
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench/ray.py: terminated"))
    print(f"$ {' '.join(sys.argv)}  ({load()})", flush=True)
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-ray-"))
    results = []
    for name in chosen:
        print(f"running {name}: a fresh cluster, {args.kills} kills {args.interval:.0f} s apart, "
              "then host b ...", flush=True)
        began = time.time()
        results.append(run_system(name, systems[name], root / name, args))
        print(f"  done in {time.time() - began:.0f} s ({load()})", flush=True)
    report(results, args)
    if args.json:
        write_json(Path(args.json), results, args)
    print(f"logs and timelines under {root}")


def write_json(path: Path, results: list[Result], args: argparse.Namespace) -> None:
    """Each system's window figures: goodput, recoveries, step time and the phases (seconds
    from a kill until every rank passed each mark, median over the kills)."""
    doc: dict[str, Any] = {"interval": args.interval, "every": args.every,
                           "step_time": args.step_time, "command": " ".join(sys.argv)}
    for res in results:
        o = res.outcome
        done = [r for r in o.recoveries() if r is not None]
        doc[o.name] = {
            "duration": o.duration, "kills": len(o.kills), "skipped": o.skipped,
            "kill_offsets": [k - o.started for k in o.kills], "recoveries": done,
            "recovery_median": _median(list(done)), "goodput": window_goodput(o),
            "step_seconds": o.steady_step(), "phases": dict(phases(o)),
            "host": vars(res.host) if res.host else None}
    path.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
