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

Exits 0 iff the faulty run succeeded with the same weights and every sample once per epoch.
"""

from __future__ import annotations

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
STEP_TIME = 0.06  # seconds added to each step: 160 steps take ~10 s, time for every fault
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


def wait_training(state: Path, launch: int, steps: int, timeout: float = 180) -> int:
    """Wait until launch number `launch` (0-based) has trained `steps` past its resume."""
    deadline = time.time() + timeout
    while time.time() < deadline:
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


def demo_spec(root: Path) -> Path:
    """job.yaml with slower steps (--step-time), so that each fault lands while the job still
    trains even on a loaded 2-core machine, where a CLI command takes a second or two."""
    spec = yaml.safe_load((HERE / "job.yaml").read_text())
    command = spec["pools"][0]["command"]
    command[command.index("--step-time") + 1] = str(STEP_TIME)
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


def faulty_run(root: Path) -> dict[str, Any]:
    state = root / "faulty"
    say("2. the same job, with faults injected while it trains")
    say(f"$ perdure run {root / 'job.yaml'} --cluster {HERE / 'cluster.yaml'} &")
    run = subprocess.Popen([*PERDURE, "--state-dir", str(state), "run", str(root / "job.yaml"),
                            "--cluster", str(HERE / "cluster.yaml")])
    wait_training(state, 0, 40)
    cli(state, "chaos", "kill", JOB, "worker-2")  # a crash: all restart from the checkpoint
    wait_training(state, 1, 20)
    cli(state, "preempt", JOB)  # save, SUSPENDED, requeued, resumed in attempt 2
    wait_training(state, 2, 20)
    say(f"$ kill -KILL {run.pid}   # the controller (`perdure run`) crashes; replicas train on")
    run.send_signal(signal.SIGKILL)
    run.wait()
    time.sleep(2.0)
    cli(state, "controller", "--exit-when-idle", "--cluster", str(HERE / "cluster.yaml"))
    cli(state, "describe", JOB)
    return result(state)


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="perdure-demo-"))
    demo_spec(root)
    clean = clean_run(root)
    faulty = faulty_run(root)
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
