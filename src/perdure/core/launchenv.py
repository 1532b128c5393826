"""What a replica is started with: argv, working directory and torchrun's environment contract.

No side effects: paths are joined as strings, nothing is read.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from perdure.core.events import Launch
from perdure.core.model import Job, Replica


@dataclass(frozen=True)
class LaunchSettings:
    """Facts of the running control plane that launches need (given by the shell)."""

    state_dir: str
    python: str  # the interpreter perdure runs under; replaces a leading `python`
    master_addr: str = "127.0.0.1"


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


def job_of_launch(launch_id: str) -> str:
    return launch_id.split(".", 1)[0]


@dataclass(frozen=True)
class Layout:
    """Where a job's replicas are, computed once for all replicas launched together (a tick
    launching 1,024 replicas stays linear in them)."""

    local: Mapping[str, tuple[int, int]]  # replica -> (LOCAL_RANK, LOCAL_WORLD_SIZE)
    group: Mapping[str, int]  # replica -> GROUP_RANK (a node is a torchrun "group")
    groups: int
    pool_sizes: Mapping[str, int]
    member_rank: Mapping[str, int]  # elastic: this round's rank of each member

    @staticmethod
    def of(job: Job) -> Layout:
        by_node: dict[str, list[str]] = {}
        for x in job.replicas:
            if x.node is not None:
                by_node.setdefault(x.node, []).append(x.name)
        local: dict[str, tuple[int, int]] = {}
        for names in by_node.values():
            local.update((name, (i, len(names))) for i, name in enumerate(names))
        order = {node: i for i, node in enumerate(by_node)}
        pools: dict[str, int] = {}
        for x in job.replicas:
            pools[x.pool] = pools.get(x.pool, 0) + 1
        return Layout(local, {x.name: order.get(x.node or "", 0) for x in job.replicas},
                      max(1, len(by_node)), pools, {n: i for i, n in enumerate(job.members)})

    def env(self, r: Replica) -> dict[str, str]:
        local_rank, local_size = self.local.get(r.name, (0, 0))
        return {
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_size),
            "GROUP_RANK": str(self.group.get(r.name, 0)),
            "GROUP_WORLD_SIZE": str(self.groups),
        }


def build_launch(job: Job, r: Replica, s: LaunchSettings, layout: Layout | None = None) -> Launch:
    """The Launch decision for replica `r` of `job` as placed now (`layout`: Layout.of(job),
    given when several replicas are launched at once)."""
    layout = layout or Layout.of(job)
    pool = next(p for p in job.spec.pools if p.name == r.pool)
    command = list(pool.command)
    if command[0] in ("python", "python3"):
        command[0] = s.python
    lid = launch_id(job, r)
    env = {
        "OMP_NUM_THREADS": "1",
        **job.spec.env,
        **pool.env,
        "RANK": str(r.rank),
        "WORLD_SIZE": str(len(job.replicas)),
        "ROLE_NAME": r.pool,
        "ROLE_RANK": str(r.index),
        "ROLE_WORLD_SIZE": str(layout.pool_sizes.get(r.pool, 0)),
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
        **layout.env(r),
    }
    if pool.min_replicas is not None:
        env["PERDURE_MIN_REPLICAS"] = str(pool.min_replicas)
    if job.elastic:
        env["PERDURE_RDZV_DIR"] = rendezvous_dir(job.id, s)
        env["PERDURE_MIN_WORLD_SIZE"] = str(job.min_members)
        if r.name in layout.member_rank:
            env["RANK"] = str(layout.member_rank[r.name])
            env["WORLD_SIZE"] = str(len(job.members))
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
