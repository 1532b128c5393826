"""Run examples/unmodified's scripts (no perdure in them) as perdure jobs: start, SIGKILL a
replica once its log shows a step, and read back the final weights, the events and how long
the kill took to become the next step."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import yaml

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "unmodified"
PERDURE = [sys.executable, "-m", "perdure.cli.main"]
# "iter 23: ... at 1796535243.008" (nanoGPT's shape), "step 13 at 1796535334.226" (the others)
STEP = re.compile(r"^(?:iter|step) (\d+)\b.* at (\d+\.\d+)$", re.M)


class Run:
    """One job in its own directory: the example script copied there, its spec, its state."""

    def __init__(self, root: Path, script: str, pool: dict[str, Any]) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(EXAMPLES / script, root / script)
        spec = {"name": "job", "env": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
                "pools": [{"name": "worker", **pool}]}
        self.spec = root / "job.yaml"
        self.spec.write_text(yaml.safe_dump(spec))
        self.state = root / "state"
        self.proc: subprocess.Popen[str] | None = None
        self.killed_at: float | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([*PERDURE, "--state-dir", str(self.state), "run",
                                      str(self.spec)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)

    def log(self, replica: str = "worker-0") -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(
            self.state.glob(f"logs/*/attempt-*/{replica}.out")))

    def steps(self, replica: str = "worker-0") -> list[tuple[int, float]]:
        return [(int(n), float(t)) for n, t in STEP.findall(self.log(replica))]

    def wait_step(self, step: int, timeout: float = 240) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(n >= step for n, _ in self.steps()):
                return
            assert self.proc is not None and self.proc.poll() is None, self.finish()
            time.sleep(0.05)
        raise AssertionError(f"no step {step} in {timeout}s:\n{self.log()[-3000:]}")

    def sigkill(self, replica: str = "worker-0") -> None:
        """SIGKILL the replica's running process (its launch's status record names it)."""
        for launch in sorted(self.state.glob(f"launches/*.{replica}.*"),
                             key=lambda p: int(p.name.rsplit(".", 1)[1])):
            status = launch / "status.json"
            if status.exists() and not (launch / "exit.json").exists():
                self.killed_at = time.time()
                os.kill(int(json.loads(status.read_text())["pid"]), signal.SIGKILL)
                return
        raise AssertionError(f"no running launch of {replica}")

    def finish(self, timeout: float = 300) -> str:
        assert self.proc is not None
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return out

    def succeeded(self) -> str:
        out = self.finish()
        assert self.proc is not None and self.proc.returncode == 0, out[-4000:]
        return out

    def kill_to_next_step(self) -> float:
        """Seconds from the SIGKILL to the first step the relaunched script logged."""
        assert self.killed_at is not None
        after = [t for _, t in self.steps() if t > self.killed_at]
        assert after, self.log()[-3000:]
        return min(after) - self.killed_at

    def warm(self, replica: str = "worker-0") -> list[bool]:
        """Whether each launch of `replica` ran in a warm standby, in launch order."""
        launches = sorted(self.state.glob(f"launches/*.{replica}.*"),
                          key=lambda p: int(p.name.rsplit(".", 1)[1]))
        return [bool(json.loads((p / "status.json").read_text()).get("warm"))
                for p in launches if (p / "status.json").exists()]

    def describe(self) -> dict[str, Any]:
        out = subprocess.run([*PERDURE, "--state-dir", str(self.state), "describe", "job",
                              "--json"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout))

    def events(self) -> list[str]:
        return [e["message"] for e in self.describe()["events"]]


def direct(root: Path, script: str, args: list[str], timeout: float = 300) -> None:
    """The script run by hand, without perdure: the uninterrupted baseline."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / script, root / script)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, script, *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]


def in_process(root: Path, script: str, args: list[str]) -> None:
    """The script run by hand in this process (torch imported already: seconds saved), as
    `python SCRIPT ARGS` runs it: its own __main__, argv and directory."""
    import runpy

    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / script, root / script)
    argv, cwd = sys.argv, os.getcwd()
    sys.argv = [script, *args]
    os.chdir(root)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv = argv
        os.chdir(cwd)


def weights(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return dict(load_file(str(path)))
    return dict(torch.load(path, map_location="cpu", weights_only=True))


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def report(shape: str, seconds: float) -> None:
    """Print a kill -> next step time where `pytest -s` shows it (measured, never asserted)."""
    print(f"\n{shape}: SIGKILL -> next step {seconds:.2f} s", flush=True)
