"""Play perdure's controller for elastic replicas: launch, kill, publish membership rounds.

The rounds are written with the controller's own `publish_round`, so the runtime reads exactly
what the real controller writes; the test decides when (deterministic and fast, no ticks).
With `transport="net"` the replicas reach it only through a real relay on the state dir (as
replicas on other hosts do): rounds, markers, the barrier's store, snapshot holders.
Replicas are forked from a server that imported torch once (elastic_forkserver.py).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_forkserver import ForkServer, Replica

from perdure.backends.relay.server import Relay
from perdure.controller.publish import publish_round
from perdure.core.events import Rendezvous

JOB = "job-elastic"
SECRET = "5e" * 32
_server: ForkServer | None = None


def fork_server(log: Path) -> ForkServer:
    """The fork server of this test session (started once: one import of torch for all)."""
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = ForkServer(log)
        atexit.register(_server.close)
    return _server


@dataclass
class Cluster:
    """Replicas worker-0..n-1 of one elastic job on nodes; `members` is the current round."""

    root: Path
    nodes: dict[str, str]  # replica -> node
    mode: str = "resize"
    min_world: int = 2
    args: dict[str, Any] = field(default_factory=dict)
    round: int = -1
    members: list[str] = field(default_factory=list)
    elastic: bool = True
    master_port: int = 0
    procs: dict[str, Replica] = field(default_factory=dict)
    exited: dict[str, list[int]] = field(default_factory=dict)
    transport: str = "file"
    relay: Relay | None = None

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def rdzv(self) -> Path:
        return self.state_dir / "rdzv" / JOB

    @property
    def out(self) -> Path:
        return self.root / "out"

    def publish(self, members: list[str], reason: str) -> None:
        self.round += 1
        self.members = sorted(members, key=lambda r: int(r.split("-")[1]))
        publish_round(self.state_dir, Rendezvous(
            JOB, 1, self.round, tuple((m, self.nodes[m]) for m in self.members), reason,
            time.time()))

    def env(self, replica: str) -> dict[str, str]:
        static = int(replica.split("-")[1])
        if not self.elastic:  # torchrun's contract only: no controller
            return dict(os.environ, OMP_NUM_THREADS="1", PERDURE_REPLICA=replica,
                        RANK=str(static), WORLD_SIZE=str(len(self.nodes)),
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.master_port))
        member = replica in self.members
        if self.transport == "net":
            return self._net_env(replica, member, static)
        return dict(
            os.environ,
            OMP_NUM_THREADS="1",
            PERDURE_JOB_ID=JOB,
            PERDURE_ATTEMPT="1",
            PERDURE_ROUND=str(self.round),
            PERDURE_REPLICA=replica,
            PERDURE_JOB_SECRET="5e" * 32,
            PERDURE_NODE=self.nodes[replica],
            PERDURE_RDZV_DIR=str(self.rdzv),
            PERDURE_ELASTIC_MODE=self.mode,
            PERDURE_MIN_WORLD_SIZE=str(self.min_world),
            RANK=str(self.members.index(replica) if member else static),
            WORLD_SIZE=str(len(self.members) if member else len(self.nodes)),
        )

    def _net_env(self, replica: str, member: bool, static: int) -> dict[str, str]:
        if self.relay is None:
            self.relay = Relay.start(self.state_dir, "127.0.0.1", secret_of=lambda job: SECRET,
                                     replicas_of=lambda job: tuple(self.nodes))
        n = len(self.exited.get(replica, [])) + (replica in self.procs)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PERDURE_")}
        return dict(
            env, OMP_NUM_THREADS="1", PERDURE_JOB_ID=JOB, PERDURE_ATTEMPT="1",
            PERDURE_ROUND=str(self.round), PERDURE_REPLICA=replica,
            PERDURE_NODE=self.nodes[replica], PERDURE_ELASTIC_MODE=self.mode,
            PERDURE_MIN_WORLD_SIZE=str(self.min_world), PERDURE_LAUNCH_ID=f"{JOB}.1.{replica}.{n}",
            PERDURE_TRANSPORT="net", PERDURE_CONTROL_ADDR=self.relay.address,
            PERDURE_JOB_SECRET=SECRET, PERDURE_RDZV="1",
            RANK=str(self.members.index(replica) if member else static),
            WORLD_SIZE=str(len(self.members) if member else len(self.nodes)),
        )

    def launch(self, replica: str) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.root / "status").mkdir(exist_ok=True)
        n = len(self.exited.get(replica, [])) + (replica in self.procs)
        self.procs[replica] = fork_server(self.root / "forkserver.log").launch(
            self.env(replica), [json.dumps({**self.args, "out": str(self.out)})],
            self.out / f"{replica}.log", self.root / "status" / f"{replica}.{n}")

    def start(self) -> None:
        """Round 0 with every replica, all launched at once."""
        if not self.elastic:
            self.members = list(self.nodes)
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.master_port = s.getsockname()[1]
            for replica in self.nodes:
                self.launch(replica)
            return
        self.publish(list(self.nodes), "admitted")
        for replica in self.nodes:
            self.launch(replica)

    def kill(self, replica: str) -> float:
        """SIGKILL `replica`; returns when it is gone (the time of the kill)."""
        proc = self.procs[replica]
        t = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.exited.setdefault(replica, []).append(proc.returncode)
        return t

    # ---- reading what the replicas wrote ---------------------------------------------------

    def records(self, ev: str | None = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path in sorted(self.out.glob("*.jsonl")):
            replica = path.name.rsplit("-", 1)[0]
            for line in path.read_text().splitlines():
                if line.strip():
                    rec = json.loads(line)
                    if ev is None or rec["ev"] == ev:
                        out.append({**rec, "replica": replica})
        return out

    def max_step(self, replica: str | None = None) -> int:
        steps = [r["step"] for r in self.records("step")
                 if replica is None or r["replica"] == replica]
        return max(steps, default=0)

    def wait_for(self, what: str, pred: Any, timeout: float = 90.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pred():
                return
            self.check_alive()
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}\n{self.tails()}")

    def check_alive(self) -> None:
        for replica, proc in self.procs.items():
            code = proc.poll()
            if code not in (None, 0) and replica in self.members:
                raise AssertionError(f"{replica} exited {code}\n{self.tails()}")

    def wait_exit(self, timeout: float = 120.0) -> dict[str, int]:
        deadline = time.time() + timeout
        try:
            while time.time() < deadline:
                codes = {r: p.poll() for r, p in self.procs.items()}
                if all(c is not None for c in codes.values()):
                    return {r: int(c) for r, c in codes.items() if c is not None}
                time.sleep(0.05)
            raise AssertionError(f"replicas still running after {timeout}s\n{self.tails()}")
        finally:
            self.stop()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        if self.relay is not None:
            self.relay.close()
            self.relay = None

    def tails(self) -> str:
        return "\n".join(f"--- {p.name}:\n{p.read_text()[-3000:]}"
                         for p in sorted(self.out.glob("*.log")))
