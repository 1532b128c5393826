"""What a replica is started with: argv, working directory and torchrun's environment contract.

No side effects: paths are joined as strings, nothing is read.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from perdure.core.events import Launch
from perdure.core.model import Job, Replica


@dataclass(frozen=True)
class LaunchSettings:
    """Facts of the running control plane that launches need (given by the shell)."""

    state_dir: str
    python: str  # the interpreter perdure runs under; replaces a leading `python`
    master_addr: str = "127.0.0.1"
    # A fast node-local directory (tmpfs) under which each job gets $PERDURE_NODE_DIR: what a
    # replica keeps there outlives its process (a group restart) but not the job.
    node_dir: str | None = None


def _resolve(base: str, path: str) -> str:
    if "://" in path or posixpath.isabs(path):
        return path
    return posixpath.normpath(posixpath.join(base, path))


def workdir(job: Job) -> str:
    return _resolve(job.spec_dir, job.spec.workdir) if job.spec.workdir else job.spec_dir


def checkpoint_dir(job: Job, s: LaunchSettings) -> str:
    if job.spec.checkpoint.dir:
        return _resolve(job.spec_dir, job.spec.checkpoint.dir)
    return posixpath.join(s.state_dir, "checkpoints", job.id)


def launch_id(job: Job, r: Replica) -> str:
    """Unique per launch; the job id comes first so a launch id finds its job."""
    return f"{job.id}.{job.attempt}.{r.name}.{r.launches}"


def rendezvous_dir(job_id: str, s: LaunchSettings) -> str:
    """Where an elastic job's rounds are published (round.json) and its stores live."""
    return posixpath.join(s.state_dir, "rdzv", job_id)


def node_dir(job_id: str, s: LaunchSettings) -> str | None:
    """The job's node-local directory ($PERDURE_NODE_DIR), if the control plane gives one."""
    return posixpath.join(s.node_dir, job_id) if s.node_dir else None


def job_of_launch(launch_id: str) -> str:
    return launch_id.split(".", 1)[0]


def _local_layout(job: Job, r: Replica) -> dict[str, str]:
    """LOCAL_RANK and GROUP_RANK from the replicas' nodes (a node is a torchrun 'group')."""
    nodes: list[str] = []
    for x in job.replicas:
        if x.node is not None and x.node not in nodes:
            nodes.append(x.node)
    same = [x for x in job.replicas if x.node == r.node]
    local_rank = next((i for i, x in enumerate(same) if x.name == r.name), 0)
    group_rank = nodes.index(r.node) if r.node in nodes else 0
    return {
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(len(same)),
        "GROUP_RANK": str(group_rank),
        "GROUP_WORLD_SIZE": str(max(1, len(nodes))),
    }


def build_launch(job: Job, r: Replica, s: LaunchSettings) -> Launch:
    """The Launch decision for replica `r` of `job` as placed now."""
    pool = next(p for p in job.spec.pools if p.name == r.pool)
    command = list(pool.command)
    if command[0] in ("python", "python3"):
        command[0] = s.python
    pool_peers = [x for x in job.replicas if x.pool == r.pool]
    lid = launch_id(job, r)
    env = {
        "OMP_NUM_THREADS": "1",
        **job.spec.env,
        **pool.env,
        "RANK": str(r.rank),
        "WORLD_SIZE": str(len(job.replicas)),
        "ROLE_NAME": r.pool,
        "ROLE_RANK": str(r.index),
        "ROLE_WORLD_SIZE": str(len(pool_peers)),
        "MASTER_ADDR": s.master_addr,
        "MASTER_PORT": str(job.master_port or 0),
        "TORCHELASTIC_RUN_ID": f"{job.id}-{job.attempt}",
        "TORCHELASTIC_RESTART_COUNT": str(job.round),
        "TORCHELASTIC_MAX_RESTARTS": str(job.spec.restart.max_replica_restarts),
        "PERDURE_JOB_ID": job.id,
        "PERDURE_JOB_NAME": job.name,
        "PERDURE_ATTEMPT": str(job.attempt),
        "PERDURE_ROUND": str(job.round),
        "PERDURE_REPLICA": r.name,
        "PERDURE_NODE": r.node or "",
        "PERDURE_LAUNCH_ID": lid,
        "PERDURE_RESTART_COUNT": str(r.restarts),
        "PERDURE_CHECKPOINT_DIR": checkpoint_dir(job, s),
        "PERDURE_REPORT_DIR": posixpath.join(s.state_dir, "launches", lid),
        "PERDURE_ELASTIC_MODE": job.spec.elastic.mode,
        **_local_layout(job, r),
    }
    if pool.min_replicas is not None:
        env["PERDURE_MIN_REPLICAS"] = str(pool.min_replicas)
    if job.elastic:
        env["PERDURE_RDZV_DIR"] = rendezvous_dir(job.id, s)
        env["PERDURE_MIN_WORLD_SIZE"] = str(job.min_members)
        if r.name in job.members:
            env["RANK"] = str(job.members.index(r.name))
            env["WORLD_SIZE"] = str(len(job.members))
    local = node_dir(job.id, s)
    if local is not None:
        env["PERDURE_NODE_DIR"] = local
    if job.spec.checkpoint.every_steps:
        env["PERDURE_CHECKPOINT_EVERY"] = str(job.spec.checkpoint.every_steps)
    prefix = posixpath.join(s.state_dir, "logs", job.id, f"attempt-{job.attempt}", r.name)
    return Launch(
        launch_id=lid,
        job_id=job.id,
        replica=r.name,
        node=r.node or "",
        command=tuple(command),
        env=env,
        cwd=workdir(job),
        memory_mb=pool.memory_mb,
        log_prefix=prefix,
    )
