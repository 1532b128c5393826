"""What a replica is started with: argv, working directory and torchrun's environment contract.

No side effects: paths are joined as strings, nothing is read.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field

from perdure import statedir
from perdure.core.events import Launch
from perdure.core.healthspec import HealthSpec
from perdure.core.layout import Layout, PoolBase
from perdure.core.model import Job
from perdure.core.replica import Replica
from perdure.core.resume import resume_args
from perdure.core.spec import JobSpec, PoolSpec


@dataclass(frozen=True)
class LaunchSettings:
    """Facts of the running control plane that launches need (given by the shell)."""

    state_dir: str
    python: str  # the interpreter perdure runs under; replaces a leading `python`
    master_addr: str = "127.0.0.1"
    # job id -> its secret (backends/relay/secrets.py); None: no authenticated listener
    job_secret: Callable[[str], str] | None = None
    node_dir: str | None = None  # node-local (tmpfs): each job's $PERDURE_NODE_DIR under it
    launches_per_tick: int | None = 256  # the rest over the next ticks; None: all at once
    health: HealthSpec = field(default_factory=lambda: HealthSpec())


# Read by the supervisor and the runtime (perdure.runtime.ranks), which core cannot import.
PROCS_ENV = "PERDURE_PROCS_PER_REPLICA"
GPUS_ENV = "PERDURE_GPUS"


def _resolve(base: str, path: str) -> str:
    if "://" in path or posixpath.isabs(path):
        return path
    return posixpath.normpath(posixpath.join(base, path))


def workdir(job: Job) -> str:
    return _resolve(job.spec_dir, job.spec.workdir) if job.spec.workdir else job.spec_dir


def checkpoint_dir(job: Job, s: LaunchSettings) -> str:
    if job.spec.checkpoint.dir:
        return _resolve(job.spec_dir, job.spec.checkpoint.dir)
    return statedir.checkpoints_dir(s.state_dir, job.id)


def launch_id(job: Job, r: Replica) -> str:
    """Unique per launch; the job id comes first so a launch id finds its job."""
    return f"{job.id}.{job.attempt}.{r.name}.{r.launches}"


def interval_env(job: Job, s: LaunchSettings) -> dict[str, str]:
    """The spec's checkpoint interval for the runtime's `Checkpointer.maybe_save`."""
    ck = job.spec.checkpoint
    if ck.every == "auto":
        return {"PERDURE_CHECKPOINT_INTERVAL_FILE": statedir.interval_path(s.state_dir, job.id)}
    env = {}  # every_steps: contract_env, which every backend and the export share
    if ck.every_seconds:
        seconds = min(ck.every_seconds, ck.max_interval_seconds)
        env["PERDURE_CHECKPOINT_EVERY_SECONDS"] = f"{seconds:g}"
    return env


def node_dir(job_id: str, s: LaunchSettings) -> str | None:
    """The job's node-local directory ($PERDURE_NODE_DIR), if the control plane gives one."""
    return posixpath.join(s.node_dir, job_id) if s.node_dir else None


def job_of_launch(launch_id: str) -> str:
    return launch_id.split(".", 1)[0]


def replica_of_launch(launch_id: str) -> str:
    """The replica's name in a launch id ("" if it is not a launch id)."""
    parts = launch_id.split(".")
    return parts[2] if len(parts) == 4 else ""


def _under(root: str, name: str) -> str:
    """posixpath.join(root, name) for a relative `name`."""
    return f"{root}{name}" if root.endswith("/") or not root else f"{root}/{name}"


@dataclass(frozen=True)
class ReplicaFacts:
    """One replica's place in its job: literals, or references its platform expands when
    the process starts (Kubernetes' `$(VAR)`)."""

    rank: str
    world_size: str
    role_rank: str
    master_addr: str
    master_port: str
    run_id: str
    attempt: str
    round: str
    replica: str
    restart_count: str
    job_id: str
    checkpoint_dir: str
    layout: dict[str, str]  # LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE


def contract_env(spec: JobSpec, pool: PoolSpec, f: ReplicaFacts) -> dict[str, str]:
    """torchrun's environment contract plus perdure's; the contract's names win over the
    spec's and the pool's env."""
    env = {
        "OMP_NUM_THREADS": "1",
        **spec.env,
        **pool.env,
        "RANK": f.rank,
        "WORLD_SIZE": f.world_size,
        "ROLE_NAME": pool.name,
        "ROLE_RANK": f.role_rank,
        "ROLE_WORLD_SIZE": str(pool.procs),
        "MASTER_ADDR": f.master_addr,
        "MASTER_PORT": f.master_port,
        "TORCHELASTIC_RUN_ID": f.run_id,
        "TORCHELASTIC_RESTART_COUNT": f.round,
        "TORCHELASTIC_MAX_RESTARTS": str(spec.restart.max_replica_restarts),
        "PERDURE_JOB_ID": f.job_id,
        "PERDURE_JOB_NAME": spec.name,
        "PERDURE_ATTEMPT": f.attempt,
        "PERDURE_ROUND": f.round,
        "PERDURE_REPLICA": f.replica,
        "PERDURE_RESTART_COUNT": f.restart_count,
        "PERDURE_CHECKPOINT_DIR": f.checkpoint_dir,
        "PERDURE_ELASTIC_MODE": spec.elastic.mode,
        # a batch scheduler's warning before the time limit must leave this long (Slurm)
        "PERDURE_GRACE_SECONDS": f"{spec.preemption.grace_seconds:g}",
        **f.layout,
    }
    if pool.integrations:  # perdure.integrations.autoinstall puts them in the script's Trainer
        env["PERDURE_INTEGRATIONS"] = ",".join(pool.integrations)
    if pool.min_replicas is not None:
        env["PERDURE_MIN_REPLICAS"] = str(pool.min_replicas)
    if pool.procs_per_replica > 1:
        env[PROCS_ENV] = str(pool.procs_per_replica)
    if pool.gpus:
        env[GPUS_ENV] = str(pool.gpus)
    if spec.checkpoint.every_steps:
        env["PERDURE_CHECKPOINT_EVERY"] = str(spec.checkpoint.every_steps)
    return env


def master_node(job: Job) -> str:
    """The node of rank 0 (a backend with real hosts sets MASTER_ADDR to its address)."""
    first = job.members[0] if job.elastic and job.members else None
    rank0 = next((x for x in job.replicas if (x.name == first if first else x.rank == 0)), None)
    return (rank0.node or "") if rank0 is not None else ""


def master_key(job: Job) -> str:
    """Which launches share a master: one attempt's, and one round's unless elastic."""
    return f"{job.id}-{job.attempt}" + ("" if job.elastic else f".{job.round}")


def build_launch(job: Job, r: Replica, s: LaunchSettings, layout: Layout | None = None) -> Launch:
    """The Launch decision for replica `r` of `job` as placed now (`layout`: shared by the
    replicas launched together)."""
    layout = layout or Layout.of(job)
    pool = next(p for p in job.spec.pools if p.name == r.pool)
    base = layout.bases.get(pool.name)
    if base is None:
        base = layout.bases[pool.name] = _pool_base(job, pool, s, layout)
    lid = launch_id(job, r)
    first_rank, first_role_rank = layout.first_rank[r.name]
    env = dict(base.env)  # the replica's own names, set as contract_env and _pool_env set them
    env["RANK"] = str(first_rank)  # of its local rank 0; the supervisor adds LOCAL_RANK
    env["ROLE_RANK"] = str(first_role_rank)
    env["PERDURE_REPLICA"] = r.name
    env["PERDURE_RESTART_COUNT"] = str(r.restarts)
    env.update(layout.env(r))
    env["PERDURE_NODE"] = r.node or ""
    env["PERDURE_LAUNCH_ID"] = lid
    env["PERDURE_REPORT_DIR"] = _under(base.reports, lid)
    # a replacement (no member) builds no rank map of every member
    members = job.member_set() if layout.members is job.members else layout.member_rank
    if job.elastic and r.name in members:
        env["RANK"] = str(layout.member_rank[r.name])
        env["WORLD_SIZE"] = str(len(job.members))
    if r.name in layout.devices:
        env["CUDA_VISIBLE_DEVICES"] = layout.devices[r.name]
    return Launch(
        launch_id=lid,
        job_id=job.id,
        replica=r.name,
        node=r.node or "",
        command=base.command,
        env=env,
        cwd=workdir(job),
        memory_mb=pool.memory_mb,
        log_prefix=_under(base.logs, r.name),
        gpus=r.gpus,
        resume=resume_args(job, r, pool),
        master_key=master_key(job),
    )


def _pool_base(job: Job, pool: PoolSpec, s: LaunchSettings, layout: Layout) -> PoolBase:
    command = list(pool.command)
    if command[0] in ("python", "python3"):
        command[0] = s.python
    facts = ReplicaFacts(
        rank="", world_size=str(layout.world), role_rank="", master_addr=s.master_addr,
        master_port="0", run_id=f"{job.id}-{job.attempt}",
        attempt=str(job.attempt), round=str(job.round), replica="", restart_count="",
        job_id=job.id, checkpoint_dir=checkpoint_dir(job, s), layout={},
    )
    env = contract_env(job.spec, pool, facts)
    env["PERDURE_NODE"] = env["PERDURE_LAUNCH_ID"] = env["PERDURE_REPORT_DIR"] = ""
    if s.job_secret is not None:
        env["PERDURE_JOB_SECRET"] = s.job_secret(job.id)
    env["PERDURE_MASTER_NODE"] = master_node(job)
    if job.elastic:
        env["PERDURE_RDZV_DIR"] = statedir.rendezvous_dir(s.state_dir, job.id)
        env["PERDURE_MIN_WORLD_SIZE"] = str(job.min_members)
    env.update(interval_env(job, s))
    local = node_dir(job.id, s)
    if local is not None:
        env["PERDURE_NODE_DIR"] = local
    return PoolBase(tuple(command), env, posixpath.join(s.state_dir, statedir.LAUNCHES),
                    statedir.log_dir(s.state_dir, job.id, job.attempt))
