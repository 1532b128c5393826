"""The Slurm backend's allocations: holder jobs (`--no-kill`: one node's failure does not end
them) named `perdure.<state dir tag>.<job id>.<attempt>` so a restarted controller finds
them, and their steps (`srun --overlap`, in sessions of their own: they outlive a controller).

Side effects: sbatch, scancel and srun processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

from perdure.backends.agents.alloc import Alloc
from perdure.backends.agents.nodedir import PREFLIGHT_ENV, SECRET_ENV
from perdure.backends.preflight import check_env
from perdure.backends.slurm import slurmcmd
from perdure.core.clusterspec import SlurmSpec
from perdure.core.events import Launch
from perdure.core.healthspec import HealthSpec


def name_prefix(state_dir: str) -> str:
    """The job-name prefix of this state dir's allocations. No side effects."""
    return f"perdure.{hashlib.sha256(state_dir.encode()).hexdigest()[:8]}."


def parse_name(prefix: str, name: str) -> tuple[str, str] | None:
    """(job id, attempt) of an allocation's job name, None when not one of ours."""
    if not name.startswith(prefix):
        return None
    job_id, _, attempt = name[len(prefix):].rpartition(".")
    return (job_id, attempt) if job_id and attempt.isdigit() else None


def slurm_env(secret: str | None = None, extra: dict[str, str] | None = None
              ) -> dict[str, str]:
    """This process's environment for srun and sbatch, without the SLURM_* variables (but
    SLURM_CONF) of a job the controller may run in: they would retarget srun."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    if secret is not None:
        env[SECRET_ENV] = secret
    return {**env, **(extra or {})}


def submit(alloc: Alloc, spec: SlurmSpec, prefix: str, exclude: list[str]) -> None:
    """Submit `alloc`'s holder job (`slurmcmd.HOLDER`)."""
    args = slurmcmd.sbatch_args(spec, f"{prefix}{alloc.job_id}.{alloc.attempt}", alloc.nodes,
                                alloc.cpus, alloc.warning, alloc.gpus, exclude)
    alloc.slurm_id = slurmcmd.run(args, stdin=slurmcmd.HOLDER).strip().split(";")[0]
    alloc.state = "PENDING"


def srun_args(alloc: Alloc, node: str, name: str, argv: list[str], gpus: bool = False
              ) -> list[str]:
    """srun's arguments for a step of `alloc` on `node`, holding the node's GPUs with
    `gpus`. No side effects."""
    args = ["srun", "--overlap", f"--jobid={alloc.slurm_id}", f"--nodelist={node}",
            "--nodes=1", "--ntasks=1", f"--job-name={name}", "--kill-on-bad-exit=0", "--quiet"]
    if alloc.gpus:
        args.append(f"--gres=gpu:{alloc.gpus}" if gpus else "--gres=none")
    return [*args, *argv]


def step(alloc: Alloc, node: str, name: str, argv: list[str], log: str,
         secret: str | None = None, gpus: bool = False,
         extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a step of `alloc` on `node` running `argv` (never waits for it)."""
    out = open(log, "ab")  # noqa: SIM115 - the child keeps it
    try:
        return subprocess.Popen(
            srun_args(alloc, node, name, argv, gpus),
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=slurm_env(secret, extra),
            start_new_session=True, close_fds=True)
    finally:
        out.close()


def node_check(alloc: Alloc, health: HealthSpec, launches: Iterable[Launch]
               ) -> dict[str, Any] | None:
    """The preflight check of `alloc`'s agents, in the environment of its attempt's (else
    its job's) launches. No side effects."""
    if not health.preflight:
        return None
    mine = [x for x in launches if x.job_id == alloc.job_id]
    like = next((x for x in mine if x.env.get("PERDURE_ATTEMPT") == alloc.attempt),
                mine[0] if mine else None)
    env = check_env(like.env) if like is not None else {}
    env.update(PERDURE_JOB_ID=alloc.job_id, PERDURE_ATTEMPT=alloc.attempt)
    return {"argv": list(health.preflight), "timeout": health.timeout_seconds, "env": env,
            "cwd": like.cwd if like is not None else None}


def start_agent(alloc: Alloc, node: str, hub: str, secret: str, warm: tuple[object, float],
                logs: str, check: dict[str, Any] | None = None) -> subprocess.Popen[bytes]:
    alloc.agents[node] = time.monotonic()
    argv = [sys.executable, "-m", "perdure.backends.agents.agent", hub, node, str(warm[0]),
            f"{warm[1]:g}"]
    extra = {PREFLIGHT_ENV: json.dumps(check)} if check is not None else None
    return step(alloc, node, "perdure-agent", argv,
                os.path.join(logs, f"agent-{alloc.slurm_id}-{node}.log"), secret, gpus=True,
                extra=extra)


def start_watcher(alloc: Alloc, node: str, launch_id: str, logs: str
                  ) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "perdure.backends.slurm.step", node, launch_id]
    return step(alloc, node, launch_id, argv, os.path.join(logs, "steps.log"))
