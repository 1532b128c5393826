"""Run framework scripts as perdure jobs through the CLI, fault them, read their results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tests.helpers.harness import kill_leftovers

HERE = Path(__file__).resolve().parent
PERDURE = [sys.executable, "-m", "perdure.cli.main"]


@dataclass
class Job:
    """One job of a state dir: its spec, checkpoint dir, step file and result dir."""

    root: Path
    name: str
    script: Path
    replicas: int
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def ckpt(self) -> Path:
        return self.root / "ckpt"

    @property
    def steps_file(self) -> Path:
        return self.root / "steps.txt"

    @property
    def out(self) -> Path:
        return self.root / "out"

    def spec(self) -> Path:
        env = {"OMP_NUM_THREADS": "1", "STEP_FILE": str(self.steps_file),
               "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **self.env}
        spec = {"name": self.name, "env": env,
                "pools": [{"name": "worker", "replicas": self.replicas,
                           "command": ["python", str(self.script), "--out", str(self.out),
                                       *self.args]}],
                "checkpoint": {"dir": str(self.ckpt)},
                "preemption": {"grace_seconds": 60}}
        path = self.root / f"{self.name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        return path

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([*PERDURE, "--state-dir", str(self.state), *args],
                             capture_output=True, text=True, timeout=timeout)
        assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-2000:])
        return out

    def start(self) -> subprocess.Popen[str]:
        self.root.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen([*PERDURE, "--state-dir", str(self.state), "run",
                                 str(self.spec())], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def steps(self) -> list[int]:
        """Every step rank 0 finished, in order, over all launches."""
        try:
            return [int(s) for s in self.steps_file.read_text().split()]
        except FileNotFoundError:
            return []

    def begins(self) -> list[int]:
        """The step each launch's training began at (rank 0, in order)."""
        return [int(s) for s in Path(f"{self.steps_file}.begin").read_text().split()]

    def step(self) -> int:
        return max(self.steps(), default=-1)

    def sigkill(self, replica: str) -> None:
        """SIGKILL a running replica at once (what `perdure chaos kill` does, without the
        seconds a CLI process takes to start, in which a fast job moves on). The script
        writes its pid to `<steps file>.pid-<replica>` when it starts; a script that does not
        (examples/gpt) is found by its launch's status record."""
        mark = Path(f"{self.steps_file}.pid-{replica}")
        if mark.exists():
            os.kill(int(mark.read_text()), signal.SIGKILL)
            return
        for launch in sorted((self.state / "launches").glob(f"*.{replica}.*")):
            status = launch / "status.json"
            if status.exists() and not (launch / "exit.json").exists():
                os.kill(int(json.loads(status.read_text())["pid"]), signal.SIGKILL)
                return
        raise AssertionError(f"{self.name}: no running launch of {replica}")

    def progress(self, replica: str) -> dict[str, list[dict[str, Any]]]:
        """Each launch's progress records of ``replica`` (what goodput is counted from), by
        launch ("<attempt>.<launch>"), in order."""
        found = {}
        for launch in (self.state / "launches").glob(f"*.{replica}.*"):
            attempt, _, number = launch.name.rsplit(".", 3)[-3:]
            path = launch / "progress.jsonl"
            if path.exists():
                found[(int(attempt), int(number))] = [
                    json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return {f"{a}.{n}": found[(a, n)] for a, n in sorted(found)}

    def wait_for(self, what: str, ok: Any, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if ok():
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: timed out waiting for {what}")

    def describe(self) -> dict[str, Any]:
        return dict(json.loads(self.cli("describe", self.name, "--json").stdout))

    def result(self) -> dict[str, Any]:
        return dict(json.loads((self.out / "result.json").read_text()))


def finish(run: subprocess.Popen[str], timeout: float = 300) -> str:
    """Wait for `perdure run` to end; its output (it must have succeeded)."""
    try:
        out, _ = run.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        run.kill()
        out, _ = run.communicate()
        raise AssertionError(f"perdure run did not end in {timeout}s:\n{out[-4000:]}") from None
    assert run.returncode == 0, out[-4000:]
    return out


def tracked_jobs() -> Iterator[list[Job]]:
    """A fixture's body: the jobs a test makes; whatever they left running is killed after."""
    made: list[Job] = []
    yield made
    for job in made:
        kill_leftovers(job.state)


def trained_samples(steps_file: Path) -> list[int]:
    """The samples the final history trained on, from the scripts' ledgers (LEDGER=1).

    Each rank appends [time, launch generation, step, sample ids] per step. A step run again
    after a resume belongs to the generation that ran it last; only that one's records count
    (the earlier run of it was rolled back with the checkpoint).
    """
    records: list[tuple[float, str, int, list[int]]] = []
    for ledger in steps_file.parent.glob(f"{steps_file.name}.ledger-*"):
        records += [tuple(json.loads(line)) for line in ledger.read_text().splitlines()]
    first_seen: dict[str, float] = {}
    for t, gen, _, _ in sorted(records):
        first_seen.setdefault(gen, t)
    last_gen: dict[int, str] = {}
    for _, gen, step, _ in records:
        if step not in last_gen or first_seen[gen] > first_seen[last_gen[step]]:
            last_gen[step] = gen
    return sorted(i for _, gen, step, ids in records if last_gen[step] == gen for i in ids)
