"""The harness behind the resume proof: run examples/ddp_mlp clean, then under injected faults.

Drives perdure through its CLI with real processes, as a user would: `perdure run`/`submit`,
`perdure controller`, `perdure chaos kill`, `perdure preempt`, SIGKILL of the controller, and
a SIGKILL that lands while a checkpoint is being written (seen from the checkpoint directory:
a `step-N.tmp-*` directory exists only while a save is in flight). Progress is read from the
primary replica's log, where train.py (run with `--log-every 1`) prints every step and where
each launch starts with the supervisor's `=== <launch> started ===` header.

The tests at the bottom check the harness's own checkers: a proof whose checks cannot fail
proves nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml
from tests.helpers.harness import PERDURE, Perdure

from perdure import statedir
from perdure.backends.node.replicas import signal_replica

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ddp_mlp"
PACED = Path(__file__).resolve().parent / "paced_mlp.py"  # the example, trained as far as allowed
TMP_DIR = re.compile(r"^step-(\d{8,})\.tmp-")
STEP_DIR = re.compile(r"^step-(\d{8,})$")  # a committed save
_RESUMED = re.compile(r"attempt (\d+) restart (\d+): resumed from (?:step (\d+)|scratch)")
_STEP = re.compile(r"^step (\d+) ", re.M)
_HEADER = re.compile(r"^=== \S+ started .* ===$", re.M)


@dataclass(frozen=True)
class Settings:
    """The example's size and pace; the clean and the faulty run must use the same."""

    epochs: int = 16  # room for four faults (and up to three tries of one) on a loaded machine
    samples: int = 1000
    batch: int = 16
    replicas: int = 4
    every: int = 10  # checkpoint.every_steps
    snapshot_every: int = 3  # node-local snapshots, newer than the checkpoint most of the time
    step_time: float = 0.02

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.samples // (self.replicas * self.batch))

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch


@dataclass(frozen=True)
class Launch:
    """One launch of the primary replica, as its log tells it."""

    attempt: int
    resumed: int | None  # the checkpoint step it restored; None: from scratch or not yet known
    started: bool  # it printed its resume line (restore done, training about to run)
    last_step: int | None
    suspended: bool
    done: bool
    skipped_partial: tuple[str, ...]
    from_snapshot: bool = False  # it resumed from a node-local snapshot, not a checkpoint


@dataclass(frozen=True)
class Result:
    """What train.py wrote at the end: final weights' hash and every (epoch, id) trained on."""

    sha256: str
    steps: int
    consumed: list[tuple[int, int]]


def parse_launches(text: str, attempt: int) -> list[Launch]:
    """The launches in one attempt's primary log (one segment per supervisor header)."""
    out = []
    for segment in _HEADER.split(text)[1:]:
        m = _RESUMED.search(segment)
        steps = [int(s) for s in _STEP.findall(segment)]
        out.append(Launch(
            attempt=attempt,
            resumed=int(m.group(3)) if m and m.group(3) else None,
            started=m is not None,
            last_step=max(steps) if steps else None,
            suspended="exiting suspended" in segment,
            done="done: final weights sha256" in segment,
            skipped_partial=tuple(re.findall(r"skipped partial checkpoint (\S+):", segment)),
            from_snapshot=m is not None and m.group(3) is not None
            and segment[m.end():].startswith(" (snapshot"),
        ))
    return out


def exactly_once_problems(consumed: list[tuple[int, int]], samples: int,
                          epochs: int) -> list[str]:
    """Why `consumed` is not every sample exactly once per epoch (empty list: it is)."""
    problems = []
    counts = Counter(consumed)
    for epoch in range(epochs):
        twice = sorted(i for i in range(samples) if counts[(epoch, i)] > 1)
        never = sorted(i for i in range(samples) if counts[(epoch, i)] == 0)
        if twice:
            problems.append(f"epoch {epoch}: {len(twice)} samples consumed more than once, "
                            f"e.g. {twice[:5]}")
        if never:
            problems.append(f"epoch {epoch}: {len(never)} samples never consumed, e.g. {never[:5]}")
    strays = sorted({pair for pair in counts if not (0 <= pair[0] < epochs
                                                     and 0 <= pair[1] < samples)})
    if strays:
        problems.append(f"{len(strays)} (epoch, id) pairs out of range, e.g. {strays[:5]}")
    return problems


def read_result(path: Path) -> Result:
    doc = json.loads(path.read_text())
    return Result(doc["sha256"], doc["steps"], [(int(e), int(i)) for e, i in doc["consumed"]])


def write_spec(p: Perdure, name: str, s: Settings, script: Path = EXAMPLE / "train.py",
               **extra: Any) -> Path:
    """A spec for the example (or `script`, which runs it) with these settings; `extra`
    overrides top-level fields."""
    command = ["python", str(script), "--epochs", str(s.epochs), "--samples",
               str(s.samples), "--batch", str(s.batch), "--step-time", str(s.step_time),
               "--log-every", "1", "--snapshot-every", str(s.snapshot_every)]
    spec: dict[str, Any] = {
        "name": name,
        "pools": [{"name": "worker", "replicas": s.replicas, "command": command,
                   "memory_mb": 2048}],
        "restart": {"max_replica_restarts": 20, "max_job_retries": 10},
        "checkpoint": {"dir": str(p.root / f"ckpt-{name}"), "every_steps": s.every},
        "preemption": {"grace_seconds": 30},
    }
    spec.update(extra)
    return p.write(f"{name}.yaml", yaml.safe_dump(spec))


def run_clean(p: Perdure, s: Settings, cluster: Path, name: str = "clean",
              timeout: float = 240) -> Result:
    """Run the example uninterrupted (`perdure run`) and return its result."""
    spec = write_spec(p, name, s)
    r = p.cli("run", str(spec), "--cluster", str(cluster), check=False, timeout=timeout)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return read_result(p.root / f"ckpt-{name}" / "result.json")


def current_launch(state: Path, job_id: str, replica: str) -> str | None:
    """The id of the newest launch of `replica` of `job_id` (`<job>.<attempt>.<replica>.<n>`)."""
    found = []
    for d in (state / statedir.LAUNCHES).glob(f"{job_id}.*.{replica}.*"):
        _, attempt, _, n = d.name.rsplit(".", 3)
        found.append((int(attempt), int(n), d.name))
    return max(found)[2] if found else None


def stop_leftovers(state: Path) -> None:
    """SIGKILL every replica still running from `state`.

    A replica started warm runs in an interpreter started before its launch, so its
    /proc environment names no job and the fixture's sweep by environment misses it; the
    launch records name every replica's process.
    """
    for d in (state / statedir.LAUNCHES).glob("*"):
        if (d / statedir.STATUS).exists() and not (d / statedir.EXIT).exists():
            with contextlib.suppress(ProcessLookupError, OSError, ValueError, KeyError):
                signal_replica(state, d.name, signal.SIGKILL)


@dataclass
class FaultyRun:
    """A submitted example job, its controller(s) and the faults the test injects into it."""

    p: Perdure
    name: str
    settings: Settings
    cluster: Path
    # Paced: the replicas train only as far as `allow` lets them (paced_mlp.py), from no step
    # at all until the test says.
    paced: bool = False
    job_id: str = ""
    controller: subprocess.Popen[bytes] | None = None
    faults: list[str] = field(default_factory=list)
    _ctl_log: IO[bytes] | None = None

    @property
    def ckpt(self) -> Path:
        return self.p.root / f"ckpt-{self.name}"

    def _cluster_args(self) -> list[str]:
        return ["--cluster", str(self.cluster)]

    @property
    def pace(self) -> Path:
        return self.p.root / f"pace-{self.name}"

    def submit(self) -> None:
        if self.paced:
            self.allow(0)
            spec = write_spec(self.p, self.name, self.settings, script=PACED,
                              env={"PACE": str(self.pace)})
        else:
            spec = write_spec(self.p, self.name, self.settings)
        self.job_id = self.p.cli("submit", str(spec), *self._cluster_args()).stdout.strip()
        self.start_controller()

    def start_controller(self) -> None:
        """`perdure controller --exit-when-idle`, its output appended to controller.log."""
        if self._ctl_log is None:
            self._ctl_log = (self.p.root / "controller.log").open("ab")
        self.controller = subprocess.Popen(
            [*PERDURE, "--state-dir", str(self.p.state), "controller", "--exit-when-idle",
             *self._cluster_args()], stdout=self._ctl_log, stderr=subprocess.STDOUT)

    def kill_controller(self) -> None:
        """SIGKILL the controller, as a crash would; its replicas keep running."""
        assert self.controller is not None
        self.controller.send_signal(signal.SIGKILL)
        self.controller.wait()
        self.faults.append("SIGKILL controller")

    def close(self) -> None:
        """Stop the controller and every replica still running (warm ones included)."""
        if self.controller is not None and self.controller.poll() is None:
            self.controller.kill()
            self.controller.wait()
        stop_leftovers(self.p.state)
        if self._ctl_log is not None:
            self._ctl_log.close()

    # ---- observing ------------------------------------------------------------------------

    def launches(self) -> list[Launch]:
        """Every launch of the primary so far, oldest first."""
        root = self.p.state / "logs" / self.job_id
        out: list[Launch] = []
        attempts = sorted(root.glob("attempt-*"), key=lambda d: int(d.name.split("-")[1]))
        for d in attempts:
            try:
                text = (d / "worker-0.out").read_text()
            except FileNotFoundError:
                continue
            out += parse_launches(text, int(d.name.split("-")[1]))
        return out

    def state(self) -> str:
        try:
            return str(self.p.describe(self.job_id)["state"])
        except subprocess.CalledProcessError:
            return "UNKNOWN"

    def wait_training(self, steps: int, newer_than: int = 0, timeout: float = 180) -> Launch:
        """Wait until a launch after the first `newer_than` has trained `steps` past its resume.

        Fails, naming what it saw, if the job finishes first: the run is too short for the
        fault schedule (a paced run cannot: see `train_to`).
        """
        def trained(cur: Launch) -> bool:
            return (cur.started and cur.last_step is not None
                    and cur.last_step >= (cur.resumed or 0) + steps)
        return self._wait_launch(trained, newer_than, timeout, f"trained {steps} steps")

    def started(self, newer_than: int = 0, timeout: float = 180) -> Launch:
        """Wait until a launch after the first `newer_than` has restored (its resume line)."""
        return self._wait_launch(lambda cur: cur.started, newer_than, timeout, "restored")

    def _wait_launch(self, ready: Callable[[Launch], bool], newer_than: int, timeout: float,
                what: str) -> Launch:
        deadline = time.time() + timeout
        seen: list[Launch] = []
        while time.time() < deadline:
            seen = self.launches()
            if len(seen) > newer_than:
                cur = seen[-1]
                if cur.done:
                    raise AssertionError(f"the job finished before the next fault could land "
                                         f"(faults so far: {self.faults}); lengthen the run")
                if ready(cur):
                    return cur
            time.sleep(0.05)
        raise AssertionError(f"no launch {what} in {timeout:.0f}s; saw {seen}")

    # ---- pacing (a paced run) -------------------------------------------------------------

    def allow(self, step: int | None) -> None:
        """Let the replicas train up to `step` (None: to the end), written atomically."""
        if step is None:
            self.pace.unlink(missing_ok=True)
            return
        tmp = self.pace.with_name(self.pace.name + ".tmp")
        tmp.write_text(str(step))
        os.replace(tmp, self.pace)

    def train_to(self, steps: int, newer_than: int = 0) -> Launch:
        """Let the next launch (after the first `newer_than`) train `steps` past its resume,
        and wait until it has: it is held there until the test allows more."""
        cur = self.started(newer_than)
        self.allow((cur.resumed or 0) + steps)
        return self.wait_training(steps, newer_than)

    # ---- faults ---------------------------------------------------------------------------

    def kill_replica(self, replica: str, sig: str = "KILL") -> None:
        """`perdure chaos kill JOB REPLICA --signal SIG`."""
        r = self.p.cli("chaos", "kill", self.job_id, replica, "--signal", sig, check=False)
        if r.returncode != 0:  # most likely the job ended first: say so
            raise AssertionError(f"`perdure chaos kill` failed: {r.stdout}{r.stderr}; the job "
                                 f"is {self.state()}, faults so far: {self.faults}")
        self.faults.append(f"SIG{sig} {replica}")

    def preempt(self, hold: bool = False) -> None:
        self.p.cli("preempt", self.job_id, *(["--hold"] if hold else []))
        self.faults.append("preempt --hold" if hold else "preempt")

    def resume(self) -> None:
        self.p.cli("resume", self.job_id)

    def node(self, action: str, node: str) -> None:
        """`perdure node ACTION NODE` (preempt, drain, restore)."""
        self.p.cli("node", action, node)
        if action != "restore":
            self.faults.append(f"node {action} {node}")

    def nodes_in_use(self) -> list[str]:
        d = self.p.describe(self.job_id)
        return sorted({r["node"] for r in d["replicas"] if r["node"] and r["state"] == "RUNNING"})

    def kill_during_save(self, replica: str = "worker-0", timeout: float = 120,
                         paced_from: int | None = None) -> bool:
        """SIGKILL `replica` as soon as a new save starts; True if that save never committed.

        A save is in flight while its `step-N.tmp-*` directory exists: it is renamed to
        `step-N` by rank 0 once every rank's shard is durable. Killing rank 0 (worker-0) in
        that window always leaves the save uncommitted; other ranks usually do.

        A paced run, its launch resumed at step `paced_from`, is let train just past its next
        save, and past the one after whenever a save committed before the test saw it (a small
        save is over in milliseconds, and a loaded machine may not run the test meanwhile).
        Once the kill is sent it is held before the step killed, so its relaunch cannot save
        that step again before `_uncommitted` looks.
        """
        launch = current_launch(self.p.state, self.job_id, replica)
        assert launch is not None, f"{replica} of {self.job_id} was never launched"
        before = set(os.listdir(self.ckpt))
        if paced_from is not None:
            self.allow(self._past_next_save(paced_from))
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name in sorted(set(os.listdir(self.ckpt)) - before):
                m = TMP_DIR.match(name)
                if m:
                    signal_replica(self.p.state, launch, signal.SIGKILL)
                    step = int(m.group(1))
                    if paced_from is not None:
                        self.allow(step - 1)
                    self.faults.append(f"SIGKILL {replica} during the save of step {step}")
                    return self._uncommitted(launch, step)
                m = STEP_DIR.match(name)
                if m and paced_from is not None:  # committed unseen: aim at the next save
                    before.add(name)
                    self.allow(self._past_next_save(int(m.group(1))))
            time.sleep(0.001)
        raise AssertionError(f"no checkpoint save started in {timeout:.0f}s")

    def _past_next_save(self, step: int) -> int:
        """Two steps past the first checkpoint save after `step`."""
        every = self.settings.every
        return (step // every + 1) * every + 2

    def _uncommitted(self, launch: str, step: int) -> bool:
        exit_record = self.p.state / statedir.LAUNCHES / launch / statedir.EXIT
        deadline = time.time() + 30
        while not exit_record.exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(2.0)  # the survivors are stopped within the 1 s round grace
        return not (self.ckpt / f"step-{step:08d}").exists()

    def wait_state(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 300
                   ) -> dict[str, Any]:
        return self.p.wait(self.job_id, pred, timeout=timeout)

    def result(self) -> Result:
        return read_result(self.ckpt / "result.json")


# ---- the checkers must be able to fail --------------------------------------------------

def test_exactly_once_flags_repeats_misses_and_strays() -> None:
    good = [(e, i) for e in range(2) for i in range(5)]
    assert exactly_once_problems(good, 5, 2) == []
    bad = [*good[1:], (1, 3), (2, 0)]
    problems = exactly_once_problems(bad, 5, 2)
    assert problems == ["epoch 0: 1 samples never consumed, e.g. [0]",
                        "epoch 1: 1 samples consumed more than once, e.g. [3]",
                        "1 (epoch, id) pairs out of range, e.g. [(2, 0)]"]


def test_parse_launches_reads_resumes_steps_and_partials() -> None:
    text = (
        "=== j.1.worker-0.1 started 2026-11-30T05:23:21.674+0000 ===\n"
        "worker-0 rank 0/4 attempt 1 restart 0: resumed from scratch (no checkpoint) in 0.04s\n"
        "step 1 epoch 0 loss 3.0\nstep 2 epoch 0 loss 2.0\n"
        "=== j.1.worker-0.2 started 2026-11-30T05:23:31.000+0000 ===\n"
        "skipped partial checkpoint step-00000020.tmp-ab12-3: unfinished save, no commit marker\n"
        "worker-0 rank 0/4 attempt 1 restart 1: resumed from step 10 in 0.10s\n"
        "step 11 epoch 0 loss 1.0\nnotice received: saved step 11; exiting suspended\n"
        "=== j.1.worker-0.3 started 2026-11-30T05:23:41.000+0000 ===\n"
        "=== j.1.worker-0.4 started 2026-11-30T05:23:51.000+0000 ===\n"
        "worker-0 rank 0/4 attempt 1 restart 2: resumed from step 12 (snapshot (file)) in 0.02s\n"
    )
    a, b, c, d = parse_launches(text, 1)
    assert (d.resumed, d.from_snapshot, b.from_snapshot) == (12, True, False)
    assert (a.resumed, a.started, a.last_step, a.suspended) == (None, True, 2, False)
    assert (b.resumed, b.last_step, b.suspended) == (10, 11, True)
    assert b.skipped_partial == ("step-00000020.tmp-ab12-3",)
    assert (c.started, c.last_step, c.done) == (False, None, False)
