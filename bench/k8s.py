"""Kubernetes benchmark: the same 4-rank DDP job as the JobSet `perdure export k8s` writes
(restarted by the real JobSet controller, RestartJobSet) and under perdure's `backend:
kubernetes`, side by side in one run, on the Kubernetes test cluster of namespace hosts.

    flock /tmp/perdure-heavy.lock .venv/bin/python bench/k8s.py [--window 180]
        [--interval 30] [--backends jobset,perdure]

Needs root, the cluster's binaries (make k8s-cluster), the JobSet controller (make k8s-jobset)
and containerd, runc from apt. One cluster from tests/integration/k8s/k8scluster.py: host cp
(the control plane, the JobSet controller, the cluster's name server) and workers a, b and c
(2 CPUs each; a lost node is NotReady 10 s after its last lease renewal).
- jobset: examples/ddp_mlp/train.py (4 replicas of 1 slot, async checkpoints every `--every`
  steps to a directory every host sees) exported with `perdure export k8s`, adapted to the
  test cluster as tests/integration/k8s/k8sjobs.py says (hostNetwork, hostPID, the local
  image with this machine's venv mounted), applied with kubectl: each failure makes the JobSet
  controller recreate every Job and pod (failurePolicy RestartJobSet).
- perdure: the same spec submitted to `perdure controller`, run on this machine as the tests
  run it (tests/integration/k8s/conftest.py: on the test bridge, where its agent pods reach
  it), with a cluster file `{backend: kubernetes, nodes: a, b, c of 2 slots, kubernetes:
  {kubeconfig, namespace, image}}` and PERDURE_K8S_HOST_DIRS (the pods mount this machine's
  interpreter, venv, sources and the run's directory): agent pods held across restarts,
  replicas restarted in place. A rank is found by the controller's copy of its launch record
  (its pod and its pid and start time there) and SIGKILLed by its pid on this machine.

Rank 0 appends one line per finished step to a timeline (bench/recovery.py's). Once the first
step is done, a rank is SIGKILLed every `--interval` s for `--window` s (ranks 1, 2, 3, 0, ...
in turn; a kill due while the job has not stepped again since the last is skipped, and one
goes only to a process of the JobSet's current restart attempt, not to an old pod's), then
the worker host of rank 1 dies (every process of its namespace) and, once its node is NotReady,
its Node object is deleted (what a cloud's node controller does for a vanished machine;
without it the dead host's pods stay Terminating and block the JobSet's foreground deletion).
A process is told apart by its pid and its rank-0 start mark (an agent pod has a pid
namespace of its own: a new pod on another host may reuse an old pod's pid).
Figures: recovery (a kill -> the first step of a process started after it, median), goodput
over the window from its first step (bench/recovery.py's), and the node loss: the death ->
NotReady, and -> the next step done by a new process. Every figure is also
given as a ratio to the JobSet's, measured in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.append(str(HERE))
sys.path.append(str(ROOT / "tests" / "integration" / "k8s"))
sys.path.append(str(ROOT))  # tests.helpers.nshosts, which the cluster imports
import recovery  # noqa: E402  (the timeline figures)
from k8scluster import K8sCluster  # noqa: E402
from k8simages import TOOLS_IMAGE  # noqa: E402
from k8sjobs import PERDURE, ddp_spec, export_jobset, for_test_cluster, rank_pid  # noqa: E402
from k8sjobset import JobSet  # noqa: E402

from perdure.backends.node import procs  # noqa: E402

NAME = "bench"
NODES = ("a", "b", "c")
SLOTS = 2  # a worker host's CPUs: the 4 ranks on a and b, c free for a lost host's
SELECTOR = f"jobset.sigs.k8s.io/jobset-name={NAME}"


def bench_spec(root: Path, args: argparse.Namespace) -> Path:
    """examples/ddp_mlp long enough for the window, its retries high enough for every kill."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    return ddp_spec(root, NAME, 100000, replicas=recovery.REPLICAS["mlp"],
                    step_time=args.step_time, every=args.every,
                    extra_args=("--log-every", "1000000", "--no-ledger", "--timeline",
                                str(root / "timeline.jsonl")),
                    restart={"max_replica_restarts": 1000, "max_job_retries": 100})


def kubernetes_refused(spec: Path, cluster_file: Path) -> str | None:
    """Why this perdure refuses `backend: kubernetes` (`perdure validate`), or None."""
    r = subprocess.run([*PERDURE, "validate", str(spec), "--cluster", str(cluster_file)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    if r.returncode == 0:
        return None
    lines = [ln.strip() for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
    return "; ".join(ln for ln in lines if "backend" in ln or "kubernetes" in ln) or lines[-1]


def perdure_cluster_file(cluster: K8sCluster, root: Path) -> Path:
    path = root / "kubernetes.yaml"
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "backend": "kubernetes", "nodes": [{"name": n, "slots": SLOTS} for n in NODES],
        "kubernetes": {"kubeconfig": str(cluster.kubeconfig), "namespace": "default",
                       "image": TOOLS_IMAGE}}))
    return path


def host_dirs(root: Path) -> str:
    """PERDURE_K8S_HOST_DIRS: what the agent pods mount, as for_test_cluster's JobSet pods do
    (this machine's interpreter, venv and sources read-only, the run's directory read-write)."""
    base = Path(os.path.realpath(sys.executable)).parents[1]
    ro = sorted({"/usr", "/lib", "/lib64", str(base), str(Path(sys.prefix).resolve()),
                 str(ROOT)})
    return ":".join([*(f"{d}:ro" for d in ro), str(root)])


def steps(timeline: Path) -> list[dict[str, Any]]:
    """Rank 0's steps, each `pid` made "pid@start" (its latest rank-0 start mark): pids of
    different pods' namespaces may repeat."""
    records, marks = recovery.read_timeline(timeline)
    starts: dict[int, list[float]] = {}
    for m in marks:
        if m["mark"] == "script" and str(m.get("rank", "0")) == "0":
            starts.setdefault(m["pid"], []).append(m["t"])
    out = []
    for r in records:
        start = max((t for t in starts.get(r["pid"], ()) if t <= r["t"]), default=0.0)
        out.append({**r, "pid": f"{r['pid']}@{start:.3f}"})
    return out


def wait_first_step(timeline: Path, timeout: float = 400) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if steps(timeline):
            return
        time.sleep(0.5)
    raise SystemExit(f"no step in {timeout:.0f}s; see {timeline.parent}")


def recovered(timeline: Path, since: float) -> bool:
    """Whether a process started after `since` (the last kill) has finished a step."""
    records = steps(timeline)
    before = {r["pid"] for r in records if r["t"] <= since}
    return any(r["t"] > since and r["pid"] not in before for r in records)


def run_window(out: recovery.Outcome, interval: float, kill: Callable[[int], bool],
               timeline: Path) -> None:
    """A kill every `interval` s; one due while the job is still recovering from the last is
    skipped (so that every kill's recovery is measured to its end)."""
    t0 = out.started = time.time()
    n = 1
    while (due := t0 + n * interval) < t0 + out.duration:
        time.sleep(max(0.0, due - time.time()))
        if (not out.kills or recovered(timeline, out.kills[-1])) and kill(
                n % recovery.REPLICAS["mlp"]):
            out.kills.append(time.time())
        else:
            out.skipped += 1
        n += 1
    time.sleep(max(0.0, t0 + out.duration - time.time()))


def attempt(cluster: K8sCluster) -> int | None:
    """The JobSet's restart attempt now (its status.restarts)."""
    with contextlib.suppress(RuntimeError):
        return int(cluster.get("jobset", NAME).get("status", {}).get("restarts", 0))
    return None


def rank1_node(cluster: K8sCluster) -> str:
    """The worker host running the JobSet's rank 1 now (by its process's host namespace)."""
    pid = None
    deadline = time.time() + 300
    while pid is None and time.time() < deadline:
        pid = rank_pid(NAME, 1, attempt(cluster))
        time.sleep(0.5)
    if pid is None:
        raise SystemExit("rank 1 is not running: no host to lose")
    uts = os.readlink(f"/proc/{pid}/ns/uts")
    for node in cluster.nodes:
        holder = (cluster.base / "run" / f"holder-{node}.pid").read_text().strip()
        if os.readlink(f"/proc/{holder}/ns/uts") == uts:
            return node
    raise SystemExit(f"rank 1 (pid {pid}) is on no worker host")


def perdure_rank(state: Path, rank: int) -> tuple[str, int] | None:
    """(agent pod, pid on this machine) of rank `rank`'s running process under perdure: the
    controller's copy of its launch record says its pod and its pid and start time in the
    pod; the process on this machine whose innermost pid and start time are those."""
    for record in sorted(state.glob(f"launches/{NAME}-*/launch.json"),
                         key=lambda f: f.stat().st_mtime, reverse=True):
        with contextlib.suppress(OSError, ValueError, KeyError):
            launch = json.loads(record.read_text())
            if launch.get("replica") != f"worker-{rank}" or record.with_name(
                    "exit.json").exists():
                continue
            status = json.loads(record.with_name("status.json").read_text())
            pid = host_pid(int(status["pid"]), int(status["start_ticks"]))
            return (str(launch["pod"]), pid) if pid is not None else None
    return None


def host_pid(inner: int, start_ticks: int) -> int | None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            nspid = next(ln for ln in (proc / "status").read_text().splitlines()
                         if ln.startswith("NSpid:")).split()[1:]
            if len(nspid) > 1 and int(nspid[-1]) == inner:
                info = procs.stat(int(proc.name))
                if info is not None and info.start_ticks == start_ticks and info.alive:
                    return int(proc.name)
    return None


def perdure_rank1_node(cluster: K8sCluster, state: Path) -> str:
    """The worker host of rank 1's agent pod now."""
    deadline = time.time() + 300
    while (found := perdure_rank(state, 1)) is None and time.time() < deadline:
        time.sleep(0.5)
    if found is None:
        raise SystemExit("rank 1 is not running: no host to lose")
    return str(cluster.get("pod", found[0])["spec"]["nodeName"])


def node_ready(cluster: K8sCluster, node: str) -> bool:
    with contextlib.suppress(RuntimeError):
        n = cluster.get("node", node)
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in n["status"]["conditions"])
    return False


def host_loss(cluster: K8sCluster, timeline: Path, node: str, settle: float = 400
              ) -> dict[str, Any]:
    """Kill `node` (rank 1's host); delete its Node once NotReady; when the next step of a new
    process came."""
    before = {r["pid"] for r in steps(timeline)}
    killed = time.time()
    cluster.kill(node)
    loss: dict[str, Any] = {"node": node, "killed": killed, "not_ready": None, "next_step": None}
    deadline = killed + settle
    while time.time() < deadline:
        if loss["not_ready"] is None and not node_ready(cluster, node):
            loss["not_ready"] = time.time() - killed
            cluster.kubectl("delete", "node", node, "--wait=false")
        new = [r for r in steps(timeline) if r["t"] > killed and r["pid"] not in before]
        if new:
            loss["next_step"] = min(r["t"] for r in new) - killed
            break
        time.sleep(0.3)
    return loss


def _kill(pid: int | None) -> bool:
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
        return True
    return False


def finish(out: recovery.Outcome, timeline: Path) -> None:
    records, out.marks = steps(timeline), recovery.read_timeline(timeline)[1]
    end = out.started + out.duration
    out.records = [r for r in records if out.started <= r["t"] - r["s"] and r["t"] <= end]


def run_jobset(cluster: K8sCluster, root: Path, args: argparse.Namespace
               ) -> tuple[recovery.Outcome, dict[str, Any]]:
    spec = bench_spec(root, args)
    exported, _ = export_jobset(spec)
    (root / "jobset.json").write_text(json.dumps(for_test_cluster(exported, root), indent=1))
    cluster.kubectl("apply", "-f", str(root / "jobset.json"))
    out = recovery.Outcome("JobSet (RestartJobSet)", args.window)
    timeline = root / "timeline.jsonl"
    try:
        wait_first_step(timeline)
        run_window(out, args.interval,
                   lambda r: _kill(rank_pid(NAME, r, attempt(cluster))), timeline)
        loss = host_loss(cluster, timeline, rank1_node(cluster))
        status = cluster.get("jobset", NAME).get("status", {})
        loss["restarts"] = status.get("restarts")
    finally:
        with contextlib.suppress(RuntimeError):
            cluster.kubectl("delete", "jobset", NAME, "--wait=false")
    finish(out, timeline)
    return out, loss


def run_perdure(cluster: K8sCluster, root: Path, args: argparse.Namespace
                ) -> tuple[recovery.Outcome, dict[str, Any]]:
    spec, cluster_file = bench_spec(root, args), perdure_cluster_file(cluster, root)
    state = root / "state"
    base = [*PERDURE, "--state-dir", str(state)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"),
           "PERDURE_K8S_HOST_DIRS": host_dirs(root)}
    cluster.assert_routed()
    with (root / "controller.log").open("wb") as log:
        ctl = subprocess.Popen([*base, "controller", "--cluster", str(cluster_file)],
                               stdout=log, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    out = recovery.Outcome("perdure (backend: kubernetes)", args.window)
    timeline = root / "timeline.jsonl"

    def kill(rank: int) -> bool:
        found = perdure_rank(state, rank)
        return _kill(found[1] if found else None)

    try:
        subprocess.run([*base, "submit", str(spec), "--cluster", str(cluster_file)],
                       check=True, capture_output=True, env=env)
        wait_first_step(timeline)
        run_window(out, args.interval, kill, timeline)
        loss = host_loss(cluster, timeline, perdure_rank1_node(cluster, state))
        with contextlib.suppress(subprocess.SubprocessError, ValueError):
            d = json.loads(subprocess.run([*base, "describe", NAME, "--json"], env=env,
                                          capture_output=True, text=True, timeout=60).stdout)
            loss["restarts"] = sum(x["restarts"] for x in d["replicas"])
            out.describe = d.get("goodput") or {}
    finally:
        subprocess.run([*base, "cancel", NAME], capture_output=True, env=env, timeout=120)
        ctl.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            ctl.wait(timeout=60)
        if ctl.poll() is None:
            ctl.kill()
        with contextlib.suppress(RuntimeError):
            cluster.kubectl("delete", "pods", "-l", "perdure.dev/state", "--grace-period=0",
                            "--force", "--wait=false")
    finish(out, timeline)
    return out, loss


def keep(cluster: K8sCluster, root: Path) -> None:
    """The cluster's daemon logs and events, kept beside the timelines."""
    with contextlib.suppress(OSError, RuntimeError, subprocess.SubprocessError):
        (root / "events.txt").write_text(cluster.kubectl("get", "events", "-A", "-o", "wide",
                                                         "--sort-by=.lastTimestamp"))
    shutil.copytree(cluster.base / "log", root / "cluster-log", dirs_exist_ok=True)


def _f(x: float | None, unit: str = "s", digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}{unit}"


def _ratio(x: float | None, base: float | None) -> str:
    return _f(x / base if x is not None and base else None, "x")


def figures(out: recovery.Outcome, loss: dict[str, Any]) -> dict[str, float | None]:
    recs = [r for r in out.recoveries() if r is not None]
    return {"recovery": statistics.median(recs) if recs else None,
            "goodput": out.goodput_after_start(), "not_ready": loss.get("not_ready"),
            "next_step": loss.get("next_step")}


def report(results: list[tuple[str, recovery.Outcome, dict[str, Any]]]) -> None:
    """Each figure and its ratio to the JobSet's (the first row, when it ran)."""
    base = figures(*results[0][1:]) if results[0][0] == "jobset" else {}
    print(f"{'backend':32} {'kills':>5} {'recovery med':>12} {'ratio':>6} {'goodput':>8} "
          f"{'ratio':>6} {'NotReady':>8} {'next step':>9} {'ratio':>6}")
    for _, out, loss in results:
        f = figures(out, loss)
        print(f"{out.name:32} {len(out.kills):5d} {_f(f['recovery']):>12} "
              f"{_ratio(f['recovery'], base.get('recovery')):>6} {_f(f['goodput'], '', 3):>8} "
              f"{_ratio(f['goodput'], base.get('goodput')):>6} {_f(f['not_ready']):>8} "
              f"{_f(f['next_step']):>9} {_ratio(f['next_step'], base.get('next_step')):>6}")
        print(f"  recoveries: {', '.join(_f(r) for r in out.recoveries())}; "
              f"{out.skipped} kills skipped (rank not running); steady step "
              f"{out.steady_step():.3f}s; host {loss.get('node')} lost; "
              f"restarts {loss.get('restarts', '-')} (the JobSet's, or perdure's replicas')")
        if out.name.startswith("perdure") and base:
            print(f"  goals (issue 40): recovery <= 0.10x the JobSet's: "
                  f"{_met(f['recovery'], base.get('recovery'), 0.1)}; goodput >= 0.90: "
                  f"{_met(0.9, f['goodput'], 1.0)}")


def _met(x: float | None, base: float | None, at_most: float) -> str:
    """Whether x / base <= at_most."""
    if x is None or not base:
        return "not measured"
    return "met" if x / base <= at_most else "not met"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--window", type=float, default=180.0, help="seconds of kills per backend")
    p.add_argument("--interval", type=float, default=30.0, help="seconds between kills")
    p.add_argument("--every", type=int, default=20, help="checkpoint every N steps")
    p.add_argument("--step-time", type=float, default=0.02, help="extra seconds per step")
    p.add_argument("--backends", default="jobset,perdure")
    args = p.parse_args(argv)
    runs = {"jobset": run_jobset, "perdure": run_perdure}
    backends = args.backends.split(",")
    unknown = [b for b in backends if b not in runs]
    if unknown or not backends:
        p.error(f"--backends: {','.join(unknown) or 'none'} unknown; choose from jobset,perdure")
    print(f"$ {' '.join(sys.argv)}  (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    root = Path(tempfile.mkdtemp(prefix="perdure-bench-k8s-"))
    cluster = K8sCluster(nodes=NODES)
    if "perdure" in backends:  # before minutes of cluster start-up
        refused = kubernetes_refused(bench_spec(root / "check", args),
                                     perdure_cluster_file(cluster, root / "check"))
        if refused:
            shutil.rmtree(root, ignore_errors=True)
            raise SystemExit(f"bench/k8s.py: the perdure half needs `backend: kubernetes`, "
                             f"which this perdure refuses ({refused}); run --backends jobset "
                             "for the baseline alone")
    cluster.up()
    results = []
    try:
        JobSet(cluster).up()
        for name in backends:
            print(f"running {name} ...", flush=True)
            out, loss = runs[name](cluster, root / name, args)
            results.append((name, out, loss))
            with contextlib.suppress(RuntimeError):  # the next backend gets idle hosts
                cluster.kubectl("wait", "--for=delete", "pods", "--all", "--timeout=120s",
                                timeout=150)
            cluster.start(loss["node"])  # the host comes back for the next backend
            cluster.sh("kubectl", "wait", "--for=condition=Ready", "node", "--all",
                       "--timeout=120s", check=False)
    finally:
        keep(cluster, root)
        cluster.down()
    report(results)
    print(f"logs and timelines under {root}")


if __name__ == "__main__":
    main()
