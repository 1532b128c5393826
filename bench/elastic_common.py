"""What bench/elastic.py and bench/elastic_faults.py share: the job's shape, launching
bench/elastic.py's worker processes, reading their step records, and playing the controller
(publishing rounds). Imported by both, importing neither.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().with_name("elastic.py")  # the script of every worker
WORLD = 4
NODES = {"worker-0": "a", "worker-1": "a", "worker-2": "b", "worker-3": "b"}
JOB = "bench-elastic"
JOB_SECRET = "be" * 32  # what perdure would hand the job (PERDURE_JOB_SECRET)
WARM = 10  # steps every rank completes before the kill
AFTER = 8  # steps after recovery before a scenario ends


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def records(out: Path, ev: str | None = None) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = []
    for path in out.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                if ev is None or rec["ev"] == ev:
                    recs.append(rec)
    return recs


def wait_until(what: str, pred: Any, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise SystemExit(f"bench: timed out waiting for {what}")


def launch(kind: str, args: dict[str, Any], env: dict[str, str], logs: Path,
           name: str) -> subprocess.Popen[bytes]:
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"{name}.log").open("ab") as log:
        return subprocess.Popen([sys.executable, str(WORKER), kind, json.dumps(args)],
                                env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def all_reached(out: Path, names: set[str], step: int) -> bool:
    done = {r["name"] for r in records(out, "step") if r["step"] >= step}
    return names <= done


def perdure_env(rdzv: Path, replica: str, round_no: int, members: list[str],
                mode: str) -> dict[str, str]:
    member = replica in members
    return {"PERDURE_JOB_ID": JOB, "PERDURE_ATTEMPT": "1", "PERDURE_ROUND": str(round_no),
            "PERDURE_REPLICA": replica, "PERDURE_NODE": NODES[replica],
            "PERDURE_JOB_SECRET": JOB_SECRET,
            "PERDURE_RDZV_DIR": str(rdzv), "PERDURE_ELASTIC_MODE": mode,
            "PERDURE_MIN_WORLD_SIZE": "2",
            "RANK": str(members.index(replica) if member else int(replica[-1])),
            "WORLD_SIZE": str(len(members) if member else WORLD)}


def publish(state_dir: Path, round_no: int, members: list[str], reason: str) -> None:
    from perdure.controller.publish import publish_round
    from perdure.core.events import Rendezvous

    publish_round(state_dir, Rendezvous(JOB, 1, round_no, tuple((m, NODES[m]) for m in members),
                                        reason, time.time()))
