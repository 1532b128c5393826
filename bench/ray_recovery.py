"""Warm start on Ray: where a group restart's time goes, with the node agents' warm standbys
and without them (PERDURE_WARM_POOL=0, every replica imports torch), side by side in one run.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/ray_recovery.py [--duration 120]
        [--kill-every 20] [--systems warm,cold]

Needs root (it makes the Ray tests' namespace hosts: tests/integration/ray/hosts.py, a head
and hosts a and b of two slots each). The job is bench/recovery.py's: examples/ddp_mlp, 4
replicas (2 on host a, 2 on host b), perdure's async checkpoint every `--every` steps, under
`perdure controller --cluster ray.yaml` in the root namespace. A replica is SIGKILLed every
`--kill-every` s (ranks 1, 2, 3, 0, ...); recovery is from the kill to the first step done by
a replica started after it. Each group restart is split into phases (bench/recovery_phases.py:
launch actors, supervisor start, script entered (interpreter + imports), process group up,
model built, checkpoint restored, first step). Figures are ratios to the cold run's.

`run_on_ray(root, args, hosts, warm_pool)` runs one window on hosts the caller made (for
bench/ray.py).
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
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "integration" / "ray"))

import recovery  # noqa: E402
from hosts import Hosts, make_hosts  # noqa: E402

from perdure import statedir  # noqa: E402
from perdure.backends.node import procs  # noqa: E402

KILL_ACTORS = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
               "[ray.kill(ray.get_actor(a['name'], namespace=sys.argv[2])) "
               "for a in ray.util.list_named_actors(True) if a['namespace'] == sys.argv[2]]")


def _ray_cluster(root: Path, hosts: Hosts, namespace: str) -> Path:
    cluster = {"backend": "ray",
               "ray": {"address": hosts.head_address, "namespace": namespace,
                       "shared_dirs": [str(root)]},  # the checkpoint dir: one filesystem here
               "nodes": [{"name": "a", "slots": 2}, {"name": "b", "slots": 2}],
               "queues": [{"name": "default"}]}
    path = root / "ray.yaml"
    path.write_text(yaml.safe_dump(cluster))
    return path


def _kill_replica(state: Path, rank: int) -> bool:
    """SIGKILL the running replica of `rank` (same pid namespace as the hosts: netns only)."""
    launch = recovery._current_launch(state, f"worker-{rank}")
    status = statedir.read_json(state / statedir.LAUNCHES / launch / statedir.STATUS) \
        if launch else None
    if status is None or (state / statedir.LAUNCHES / str(launch) / statedir.EXIT).exists():
        return False
    return bool(procs.send_signal(int(status["pid"]), int(status["start_ticks"]),
                                  signal.SIGKILL))


def run_on_ray(root: Path, args: argparse.Namespace, hosts: Hosts,
               warm_pool: int | None) -> recovery.Outcome:
    """One window of the job on `hosts`, with the nodes' warm pools of `warm_pool` standbys
    (None: the default, "auto")."""
    root.mkdir(parents=True, exist_ok=True)
    state, timeline = root / "state", root / "timeline.jsonl"
    spec = recovery._perdure_spec(root, args, timeline)
    namespace = f"bench-{root.name}-{os.getpid()}"
    cluster = ["--cluster", str(_ray_cluster(root, hosts, namespace))]
    base = [*recovery.PERDURE, "--state-dir", str(state)]
    env = hosts.env()
    if warm_pool is not None:
        env["PERDURE_WARM_POOL"] = str(warm_pool)
    name = f"perdure on Ray, warm pool {warm_pool if warm_pool is not None else 'auto'}"
    out = recovery.Outcome(name, args.duration)
    job = subprocess.run([*base, "submit", str(spec), *cluster], check=True, text=True,
                         capture_output=True, env=env).stdout.strip()
    with (root / "controller.log").open("wb") as log:
        ctl = subprocess.Popen([*base, "controller", *cluster], env=env, stdout=log,
                               stderr=subprocess.STDOUT)
        try:
            _wait_first_step(timeline, ctl)
            recovery._run_window(out, args.kill_every, lambda rank: _kill_replica(state, rank),
                                 recovery.REPLICAS["mlp"])
            out.describe = recovery._describe(base, job)["goodput"]
            print(f"  {_pool_memory(hosts, state)}", flush=True)
            out.describe_goodput = out.describe["goodput"]
        finally:
            ctl.kill()
            ctl.wait()
            subprocess.run([sys.executable, "-c", KILL_ACTORS, hosts.head_address, namespace],
                           capture_output=True, timeout=120, env=env, check=False)
    out.records, out.marks = recovery.read_timeline(timeline)
    (root / "kills.json").write_text(json.dumps(out.kills))
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _memory_mb(pid: int) -> tuple[float, float]:
    """(proportional, private) set size of a process in MB."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0, 0.0
    kb = {line.split()[0]: int(line.split()[1]) for line in text.splitlines()[1:]}
    return kb.get("Pss:", 0) / 1024, (kb.get("Private_Clean:", 0)
                                      + kb.get("Private_Dirty:", 0)) / 1024


def _pool_memory(hosts: Hosts, state: Path) -> str:
    """What host a's spawner, template and idle standbys hold (proportional and private set
    sizes): every process forked from the spawner that is not a running replica or its
    supervisor."""
    running: set[int] = set()
    for d in (state / statedir.LAUNCHES).glob("recovery-*"):
        status = statedir.read_json(d / statedir.STATUS)
        if status is not None and not (d / statedir.EXIT).exists():
            running |= {int(status["pid"]), int(status["supervisor_pid"])}
    pool = [pid for pid in hosts.hosts["a"].pids()
            if pid not in running and b"node.zygote" in _cmdline(pid)]
    sizes = [_memory_mb(pid) for pid in pool]
    return (f"host a: spawner + template + idle standbys: {len(pool)} processes, "
            f"PSS {sum(s[0] for s in sizes):.0f} MB, private {sum(s[1] for s in sizes):.0f} MB "
            "(pages shared with the replicas forked from the template count in PSS pro rata)")


def _wait_first_step(timeline: Path, ctl: subprocess.Popen[bytes], timeout: float = 180) -> None:
    """The window starts once the job trains (its first start is not what is measured)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and ctl.poll() is None:
        if recovery.read_timeline(timeline)[0]:
            return
        time.sleep(0.5)
    raise SystemExit(f"the job did not take a step within {timeout:.0f} s; see "
                     f"{timeline.parent / 'controller.log'}")


def report(outcomes: list[recovery.Outcome]) -> None:
    base = next((o for o in outcomes if "pool 0" in o.name), None)
    base_done = [r for r in base.recoveries() if r is not None] if base else []
    base_med = statistics.median(base_done) if base_done else None
    print(f"\n{'system':<36} {'kills':>5} {'rec. median':>11} {'min':>6} {'max':>6} "
          f"{'x cold':>7} {'goodput':>8} {'x cold':>7}")
    for o in outcomes:
        done = [r for r in o.recoveries() if r is not None]
        med = statistics.median(done) if done else None
        gp = o.productive() / o.duration
        base_gp = base.productive() / base.duration if base else None
        ratio = med / base_med if med is not None and base_med else None
        missed = f" ({len(o.kills) - len(done)} not recovered)" if len(done) < len(o.kills) \
            else ""
        print(f"{o.name:<36} {len(o.kills):>5} {recovery._fmt(med):>11} "
              f"{recovery._fmt(min(done, default=None))} {recovery._fmt(max(done, default=None))}"
              f" {recovery._fmt(ratio):>7} {gp:8.3f} "
              f"{recovery._fmt(gp / base_gp if base_gp else None):>7}{missed}")


def _warm_used(root: Path) -> str:
    """How many of the run's launches started in a warm standby."""
    statuses = [statedir.read_json(d / statedir.STATUS) or {}
                for d in (root / "state" / statedir.LAUNCHES).glob("recovery-*")]
    started = [s for s in statuses if s]
    return f"{sum(bool(s.get('warm')) for s in started)} of {len(started)} launches started warm"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=120.0, help="seconds per system")
    p.add_argument("--kill-every", type=float, default=20.0)
    p.add_argument("--every", type=int, default=20, help="checkpoint every N steps")
    p.add_argument("--step-time", type=float, default=0.02, help="extra seconds per step")
    p.add_argument("--systems", default="cold,warm", help="cold (pool 0) and/or warm (auto)")
    p.set_defaults(workload="mlp")  # recovery._perdure_spec's job: examples/ddp_mlp
    args = p.parse_args(argv)
    pools = {"cold": 0, "warm": None}
    chosen = args.systems.split(",")
    for name in chosen:
        if name not in pools:
            raise SystemExit(f"--systems: unknown {name!r}; use cold, warm")
    print(f"$ {' '.join(sys.argv)}  (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-ray-recovery-"))
    hosts = make_hosts({"a": 2, "b": 2})
    outcomes = []
    try:
        for name in chosen:
            print(f"running {name} for {args.duration:.0f} s ...", flush=True)
            outcomes.append(run_on_ray(root / name, args, hosts, pools[name]))
            print(f"  done (load {os.getloadavg()[0]:.1f}); {_warm_used(root / name)}",
                  flush=True)
    finally:
        hosts.close()
    report(outcomes)
    for name, outcome in zip(chosen, outcomes, strict=True):
        recovery.report_phases(outcome, root / name)
    print(f"logs and timelines under {root}")


if __name__ == "__main__":
    main()
