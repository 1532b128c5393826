"""`Perdure`: perdure driven through its CLI with real processes, as a user does (the
integration tests' harness; each cluster's tests subclass it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PERDURE = [sys.executable, "-m", "perdure.cli.main"]


@dataclass
class Perdure:
    root: Path

    @property
    def state(self) -> Path:
        return self.root / "state"

    def cli(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*PERDURE, "--state-dir", str(self.state), *args],
                              capture_output=True, text=True, timeout=timeout, check=check)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*PERDURE, "--state-dir", str(self.state), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def write(self, name: str, data: dict[str, Any] | str) -> Path:
        path = self.root / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
        return path

    def spec(self, name: str = "job", replicas: int = 1, command: list[str] | None = None,
             **extra: Any) -> Path:
        pool = {"name": "worker", "replicas": replicas,
                "command": command or ["python", "-c", "pass"]}
        pool.update(extra.pop("pool", {}))
        return self.write(f"{name}.yaml", {"name": name, "pools": [pool], **extra})

    def cluster(self, nodes: dict[str, int], quota: int | None = None) -> Path:
        q: dict[str, Any] = {"name": "default"}
        if quota is not None:
            q["quota"] = quota
        return self.write("cluster.yaml", {
            "backend": "local",
            "nodes": [{"name": n, "slots": s} for n, s in nodes.items()],
            "queues": [q],
        })

    def describe(self, job: str) -> dict[str, Any]:
        return json.loads(self.cli("describe", job, "--json").stdout)

    def wait(
        self, job: str, pred: Callable[[dict[str, Any]], bool], timeout: float = 60
    ) -> dict[str, Any]:
        deadline = time.time() + timeout
        d: dict[str, Any] = {}
        while time.time() < deadline:
            try:
                d = self.describe(job)
            except subprocess.CalledProcessError:
                d = {}
            if d and pred(d):
                return d
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting on {job}: {json.dumps(d)[:2000]}")


def kill_leftovers(state: Path) -> None:
    """No test may leave a process behind: kill anything still running from this state dir."""
    import psutil

    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            env = proc.info["environ"] or {}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        mine = str(state) in cmd or launched_from(env, state)
        if mine and proc.pid != os.getpid():
            proc.kill()


def launched_from(env: dict[str, str], state: Path) -> bool:
    """A replica of this state dir, under either transport (net has no PERDURE_REPORT_DIR;
    the supervisor's stop file is in the launch dir under both)."""
    return any(env.get(k, "").startswith(str(state))
               for k in ("PERDURE_REPORT_DIR", "PERDURE_STOP_FILE"))


def alive_replica_processes(state: Path) -> list[int]:
    """PIDs of replica processes started from this state dir (found by their environment)."""
    import psutil

    out = []
    for proc in psutil.process_iter(["environ"]):
        try:
            env = proc.info["environ"] or {}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if launched_from(env, state) and proc.status() != "zombie":
            out.append(proc.pid)
    return out
