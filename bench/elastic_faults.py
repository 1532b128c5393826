"""Elastic benchmark, part 2: goodput under repeated faults, and node loss -> hot-swap.

Imported by bench/elastic.py (run that). Goodput: one resize-mode job of 4 ranks trains first
without faults, then one replica is SIGKILLed every
`period` seconds (round robin; the replacement is launched at once and the group grows back
when it is up, as the controller does), then without faults again; the baseline is the
throughput of the two fault-free stretches. For each phase:

- goodput (work): samples trained in the phase / samples the fault-free throughput gives in
  the same time. Counts everything: detection, rebuild, the slower group of 3, and the CPU the
  replacement's start-up (import torch) takes from the survivors on this 2-core machine.
- goodput (time): the share of the phase in which the group was stepping: a gap between
  steps longer than 2 fault-free step times loses all but one step time; steps of a smaller
  group count as productive, as `perdure describe` counts them.

Hot-swap: the real controller (`perdure controller`) with two virtual nodes of 2 slots, a
high-priority job of 2 replicas and a low-priority one of 2; `perdure chaos fail-node` takes
the high job's node; timed from the command to the high job RUNNING again (on the low job's
node, the low job preempted) and to its replicas' code running.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import elastic_common as eb

BATCH = 16  # eb.train_steps' batch per rank


def run_goodput(base: dict[str, Any], tmp: Path, baseline_s: float,
                phases: list[tuple[str, float, int]]) -> dict[str, Any]:
    """phases: (label, period in s, faults); returns each phase's goodput."""
    out, state_dir = tmp / "out", tmp / "state"
    rdzv = state_dir / "rdzv" / eb.JOB
    args = {**base, "out": str(out), "restore": "sync"}
    members = list(eb.NODES)
    round_no = 0
    eb.publish(state_dir, round_no, members, "admitted")
    procs = {r: eb.launch("elastic", args, eb.perdure_env(rdzv, r, 0, members, "resize"), tmp, r)
             for r in members}
    victims = itertools.cycle(["worker-2", "worker-1", "worker-3", "worker-0"])
    windows: list[tuple[str, float, float, int]] = []
    try:
        eb.wait_until("warm-up", lambda: eb.all_reached(out, set(eb.NODES), eb.WARM))
        start = time.time()
        time.sleep(baseline_s)
        windows.append(("no faults", start, time.time(), 0))
        for label, period, faults in phases:
            start = time.time()
            for i in range(faults):
                _sleep_until(start + i * period)
                victim = next(victims)
                os.kill(procs[victim].pid, signal.SIGKILL)
                procs[victim].wait()
                survivors = [m for m in members if m != victim]
                round_no += 1
                eb.publish(state_dir, round_no, survivors, f"shrink 4 -> 3: {victim} killed")
                procs[victim] = eb.launch("elastic", args, eb.perdure_env(
                    rdzv, victim, round_no, survivors, "resize"), tmp, victim)
                round_no += 1
                eb.publish(state_dir, round_no, members, f"grow 3 -> 4: {victim} is up")
            _sleep_until(start + faults * period)
            windows.append((label, start, time.time(), faults))
        start = time.time()  # fault-free again: the machine's load drifts (other work)
        time.sleep(baseline_s)
        windows.append(("no faults", start, time.time(), 0))
    finally:
        eb.stop(list(procs.values()))
    steps = _global_steps(out)
    calm = [(t0, t1) for label, t0, t1, _ in windows if label == "no faults"]
    base_rate = (sum(_samples(steps, t0, t1) for t0, t1 in calm)
                 / sum(t1 - t0 for t0, t1 in calm))
    gap = _median_gap(steps, *calm[0])
    result: dict[str, Any] = {"baseline_samples_per_s": base_rate, "step_s": gap,
                              "baseline_each": [_samples(steps, t0, t1) / (t1 - t0)
                                                for t0, t1 in calm]}
    for label, t0, t1, faults in windows[1:-1]:
        work = _samples(steps, t0, t1) / (base_rate * (t1 - t0))
        stalled = sum(b - a - gap for a, b in itertools.pairwise(
            [t0, *[t for t, _ in steps if t0 < t <= t1], t1]) if b - a > 2 * gap)
        result[label] = {"seconds": t1 - t0, "faults": faults, "goodput_work": work,
                         "goodput_time": 1 - stalled / (t1 - t0)}
    return result


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def _global_steps(out: Path) -> list[tuple[float, int]]:
    """(time, world size) of each global step, at its first completion on any rank."""
    first: dict[int, tuple[float, int]] = {}
    for r in eb.records(out, "step"):
        if r["step"] not in first or r["t"] < first[r["step"]][0]:
            first[r["step"]] = (r["t"], r["world"])
    return sorted(first.values())


def _samples(steps: list[tuple[float, int]], t0: float, t1: float) -> int:
    return sum(world * BATCH for t, world in steps if t0 < t <= t1)


def _median_gap(steps: list[tuple[float, int]], t0: float, t1: float) -> float:
    ts = [t for t, _ in steps if t0 < t <= t1]
    return float(statistics.median(b - a for a, b in itertools.pairwise(ts)))


# ---- hot-swap through the real controller -------------------------------------------------

WORKER = """
import os, time, perdure
ctx = perdure.init(distributed=False)
open(os.path.join(os.environ["MARKS"], f"{ctx.replica}-{os.getpid()}"), "w").close()
while True:
    if ctx.should_stop:
        ctx.exit_suspended()
    time.sleep(0.02)
"""


def run_hotswap(tmp: Path) -> dict[str, Any]:
    import yaml

    state = tmp / "state"
    cli = [sys.executable, "-m", "perdure.cli.main", "--state-dir", str(state)]
    marks = {"high": tmp / "marks-high", "low": tmp / "marks-low"}
    for d in marks.values():
        d.mkdir(parents=True)
    (tmp / "worker.py").write_text(WORKER)
    cluster = tmp / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"backend": "local", "queues": [{"name": "default"}],
                                       "nodes": [{"name": "a", "slots": 2},
                                                 {"name": "b", "slots": 2}]}))
    for name, prio in (("high", 10), ("low", 1)):
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump({
            "name": name, "priority": prio, "env": {"MARKS": str(marks[name])},
            "preemption": {"grace_seconds": 10},
            "pools": [{"name": "worker", "replicas": 2,
                       "command": ["python", str(tmp / "worker.py")]}]}))

    def run(*a: str) -> str:
        return subprocess.run([*cli, *a], check=True, capture_output=True, text=True).stdout

    def describe(job: str) -> dict[str, Any]:
        return dict(json.loads(run("describe", job, "--json")))

    high = run("submit", str(tmp / "high.yaml"), "--cluster", str(cluster)).strip()
    with (tmp / "controller.log").open("ab") as log:
        ctl = subprocess.Popen([*cli, "controller", "--cluster", str(cluster)], stdout=log,
                               stderr=subprocess.STDOUT)
    try:
        eb.wait_until("high running", lambda: len(list(marks["high"].iterdir())) == 2, 120)
        low = run("submit", str(tmp / "low.yaml")).strip()
        eb.wait_until("low running", lambda: len(list(marks["low"].iterdir())) == 2, 120)
        time.sleep(3)  # the warm pool refills, as it would in a cluster that has been up
        node = describe(high)["replicas"][0]["node"]
        before = set(marks["high"].iterdir())
        began = time.time()
        run("chaos", "fail-node", node)

        def running_again() -> bool:
            d = describe(high)
            return d["state"] == "RUNNING" and all(r["node"] not in (node, None)
                                                   for r in d["replicas"])

        eb.wait_until("high running again", running_again, 120)
        running = time.time()
        eb.wait_until("high's code", lambda: len(set(marks["high"].iterdir()) - before) == 2,
                      120)
        code = max(p.stat().st_mtime for p in set(marks["high"].iterdir()) - before)
        events = [e["message"] for e in describe(high)["events"]]
        assert any(f"hot-swap: preempting {low}" in m for m in events), events
        for job in (high, low):
            run("cancel", job)
        return {"to_running_s": running - began, "to_user_code_s": code - began,
                "node": node}
    finally:
        ctl.kill()
        ctl.wait()
        _kill_leftovers(state)


def _kill_leftovers(state: Path) -> None:
    import psutil

    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            env = proc.info["environ"] or {}
            cmd = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if (str(state) in cmd or str(state) in env.get("PERDURE_REPORT_DIR", "")) and (
                proc.pid != os.getpid()):
            proc.kill()
