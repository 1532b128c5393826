"""The demo: a 4-replica DDP job survives a kill, a preemption and a controller crash, and ends
with exactly the weights of an uninterrupted run.

`make demo` runs this. It drives perdure the way a person would, through the CLI:

1. `perdure run job.yaml`: the uninterrupted run, for reference;
2. `perdure run job.yaml` again, and from the side, while it trains:
   `perdure chaos kill ddp-mlp worker-2` (a replica crashes: every replica restarts from the
   last checkpoint), `perdure preempt ddp-mlp` (the job saves, is suspended and requeued, and
   resumes in a new attempt), then SIGKILL of the `perdure run` process itself (the
   controller crashes; the replicas keep training) and `perdure controller` to take over;
3. both runs' final-weight SHA-256 and the samples each trained on, side by side.

Exits 0 iff the faulty run succeeded with the same weights and every sample once per epoch,
each fault having landed while the job trained. Both runs add the same sleep to each step, chosen
from how long a CLI command takes here (the slower of two `perdure validate`s): each fault is a
command that the job trains on through, and a loaded machine's commands are slower
(`--step-time` sets it).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
PERDURE = [sys.executable, "-m", "perdure.cli.main"]
JOB = "ddp-mlp"
STEPS = 160  # the job's: 10 epochs of 16 steps
# The faulty run waits for 40 + 20 + 20 steps and loses up to 10 (the snapshot interval); the
# 70 steps left must cover its three commands (kill, preempt, the controller's start), the 2 s
# without a controller and the restarts' reactions, twice over.
SPARE_STEPS = 70
STEP_OVERHEAD = 0.015  # seconds a step computes on top of its sleep
MIN_STEP_TIME, MAX_STEP_TIME = 0.06, 0.6
_HEADER = re.compile(r"^=== \S+ started .* ===$", re.M)
_RESUMED = re.compile(r"resumed from (?:step (\d+)|scratch)")
_STEP = re.compile(r"^step (\d+) ", re.M)


def say(text: str) -> None:
    print(f"\n\033[1m{text}\033[0m", flush=True)


def cli(state: Path, *args: str, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    if not quiet:
        say(f"$ perdure {' '.join(args)}")
    out = subprocess.run([*PERDURE, "--state-dir", str(state), *args], text=True,
                         capture_output=quiet, check=False)
    if out.returncode != 0 and quiet:
        sys.stdout.write(out.stdout + out.stderr)
    return out


def launches(state: Path) -> list[tuple[int | None, int]]:
    """(resumed step, last step printed) of every launch of worker-0 so far, oldest first."""
    out: list[tuple[int | None, int]] = []
    for log in sorted(state.glob("logs/*/attempt-*/worker-0.out"),
                      key=lambda p: int(p.parent.name.split("-")[1])):
        for segment in _HEADER.split(log.read_text())[1:]:
            m = _RESUMED.search(segment)
            steps = [int(s) for s in _STEP.findall(segment)]
            if m:
                out.append((int(m.group(1)) if m.group(1) else None, max(steps, default=-1)))
    return out


def finished(state: Path) -> bool:
    return bool(list(state.glob("checkpoints/*/result.json")))


def too_fast(fault: str, step_time: float) -> SystemExit:
    return SystemExit(f"the job finished before {fault}: at {step_time:.2f} s a step it trained "
                      "faster than this machine ran the commands; rerun it with a larger "
                      "--step-time (e.g. twice that)")


def wait_training(state: Path, launch: int, steps: int, fault: str, step_time: float,
                  timeout: float = 180) -> int:
    """Wait until launch number `launch` (0-based) has trained `steps` past its resume; exit at
    once if the job finished first (`fault` never landed)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if finished(state):
            raise too_fast(fault, step_time)
        seen = launches(state)
        if len(seen) > launch:
            resumed, last = seen[launch]
            if last >= (resumed or 0) + steps:
                return last
        time.sleep(0.2)
    raise SystemExit(f"launch {launch + 1} did not train {steps} steps in {timeout:.0f}s")


def result(state: Path) -> dict[str, Any]:
    found = list(state.glob("checkpoints/*/result.json"))
    if not found:
        raise SystemExit(f"no result.json under {state}/checkpoints: the run did not finish")
    doc: dict[str, Any] = json.loads(found[0].read_text())
    return doc


def exactly_once(doc: dict[str, Any]) -> bool:
    """Every sample id appears once per epoch, and all epochs hold the same ids."""
    counts = Counter((e, i) for e, i in doc["consumed"])
    per_epoch = [sorted(i for (e, i) in counts if e == epoch) for epoch in range(doc["epochs"])]
    return max(counts.values()) == 1 and all(ids == per_epoch[0] for ids in per_epoch)


def pace(root: Path) -> float:
    """The seconds each step sleeps: the spare steps outlast three commands and 2 s, twice
    over, a command taking as long as the slower of two `perdure validate`s of the spec."""
    say(f"$ perdure validate {root / 'job.yaml'} --cluster {HERE / 'cluster.yaml'}")
    took = []
    for _ in range(2):
        began = time.monotonic()
        out = cli(root / "probe", "validate", str(root / "job.yaml"), "--cluster",
                  str(HERE / "cluster.yaml"), quiet=True)
        took.append(time.monotonic() - began)
        if out.returncode != 0:
            raise SystemExit("the demo's job spec is not valid")
    needed = 2.0 * (3 * max(took) + 2.0) / SPARE_STEPS - STEP_OVERHEAD
    step_time = round(min(MAX_STEP_TIME, max(MIN_STEP_TIME, needed)), 3)
    print(f"   valid; a command takes {max(took):.1f}s here, so each step sleeps {step_time}s "
          f"({STEPS} steps: ~{STEPS * (step_time + STEP_OVERHEAD):.0f}s of training)")
    return step_time


def demo_spec(root: Path, step_time: float) -> Path:
    """job.yaml with slower steps (--step-time), so that each fault lands while the job still
    trains even on a loaded 2-core machine, where a CLI command takes a second or more."""
    spec = yaml.safe_load((HERE / "job.yaml").read_text())
    command = spec["pools"][0]["command"]
    command[command.index("--step-time") + 1] = str(step_time)
    command += ["--log-every", "5"]  # the waits below see a launch's step within 5, not 20
    spec["workdir"] = str(HERE)  # train.py stays where it is
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def clean_run(root: Path) -> dict[str, Any]:
    state = root / "clean"
    say(f"1. the uninterrupted run, for reference: perdure run {root / 'job.yaml'}")
    began = time.time()
    out = cli(state, "run", str(root / "job.yaml"), "--cluster", str(HERE / "cluster.yaml"),
              quiet=True)
    if out.returncode != 0:
        raise SystemExit("the uninterrupted run failed")
    doc = result(state)
    print(f"   SUCCEEDED in {time.time() - began:.0f}s; final weights sha256 {doc['sha256']}")
    return doc


def faulty_run(root: Path, step_time: float) -> dict[str, Any]:
    state = root / "faulty"
    say("2. the same job, with faults injected while it trains")
    say(f"$ perdure run {root / 'job.yaml'} --cluster {HERE / 'cluster.yaml'} &")
    run = subprocess.Popen([*PERDURE, "--state-dir", str(state), "run", str(root / "job.yaml"),
                            "--cluster", str(HERE / "cluster.yaml")])
    wait_training(state, 0, 40, "the kill", step_time)
    # a crash: all restart from the checkpoint
    if cli(state, "chaos", "kill", JOB, "worker-2").returncode != 0:
        raise too_fast("the kill", step_time) if finished(state) else SystemExit(
            "the kill failed")
    wait_training(state, 1, 20, "the preemption", step_time)
    # save, SUSPENDED, requeued, resumed in attempt 2
    if cli(state, "preempt", JOB).returncode != 0:
        raise too_fast("the preemption", step_time) if finished(state) else SystemExit(
            "the preemption failed")
    wait_training(state, 2, 20, "the controller crash", step_time)
    say(f"$ kill -KILL {run.pid}   # the controller (`perdure run`) crashes; replicas train on")
    run.send_signal(signal.SIGKILL)
    run.wait()
    if finished(state):  # the job ended before its controller did: no takeover to show
        raise too_fast("the controller crash", step_time)
    time.sleep(2.0)
    cli(state, "controller", "--exit-when-idle", "--cluster", str(HERE / "cluster.yaml"))
    cli(state, "describe", JOB)
    return result(state)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--step-time", type=float, default=None,
                   help="seconds each step sleeps (default: from how fast a command runs here)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="perdure-demo-"))
    demo_spec(root, MIN_STEP_TIME)  # what `perdure validate` checks; the pace only sleeps
    step_time = args.step_time if args.step_time is not None else pace(root)
    demo_spec(root, step_time)
    clean = clean_run(root)
    faulty = faulty_run(root, step_time)
    same = faulty["sha256"] == clean["sha256"]
    once = exactly_once(faulty) and sorted(faulty["consumed"]) == sorted(clean["consumed"])
    say("3. the result")
    print(f"   uninterrupted run: final weights sha256 {clean['sha256']}")
    print(f"   faulty run:        final weights sha256 {faulty['sha256']}")
    print(f"   {'IDENTICAL' if same else 'DIFFERENT'} weights; every sample trained on "
          f"{'exactly once per epoch' if once else 'NOT exactly once per epoch'} "
          f"({len(faulty['consumed'])} (epoch, sample) pairs over {faulty['epochs']} epochs)")
    print(f"\nstate, logs, checkpoints and events are under {root}")
    return 0 if same and once else 1


if __name__ == "__main__":
    sys.exit(main())
