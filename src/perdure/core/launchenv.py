"""What a replica is started with: argv, working directory and torchrun's environment contract.

No side effects: paths are joined as strings, nothing is read.
"""

from __future__ import annotations

import itertools
import operator
import posixpath
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from perdure.core.events import Launch
from perdure.core.model import Job, Node, Replica
from perdure.core.spec import JobSpec, PoolSpec


@dataclass(frozen=True)
class LaunchSettings:
    """Facts of the running control plane that launches need (given by the shell)."""

    state_dir: str
    python: str  # the interpreter perdure runs under; replaces a leading `python`
    master_addr: str = "127.0.0.1"
    # job id -> the job's secret (backends/relay/secrets.py); None: launches carry no secret, so
    # replicas open no authenticated listener (snapshots are then not replicated)
    job_secret: Callable[[str], str] | None = None
    # A fast node-local directory (tmpfs) under which each job gets $PERDURE_NODE_DIR: what a
    # replica keeps there outlives its process (a group restart) but not the job.
    node_dir: str | None = None
    # A tick sends at most this many launches; a job placing more sends the rest over the
    # next ticks, in rank order, keeping its placement (None: all at once; the simulator's
    # ticks cost no time). Bounds the tick of a 16,384-replica job (bench/controller.py:
    # at 512, 512 relaunches made a tick of ~40 ms of CPU by themselves).
    launches_per_tick: int | None = 256


_NODE = operator.attrgetter("node")
_NAME = operator.attrgetter("name")
_K = TypeVar("_K")
_POOL = operator.attrgetter("pool")
_PROCS = operator.attrgetter("procs_per_replica")
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
    return posixpath.join(s.state_dir, "checkpoints", job.id)


def launch_id(job: Job, r: Replica) -> str:
    """Unique per launch; the job id comes first so a launch id finds its job."""
    return f"{job.id}.{job.attempt}.{r.name}.{r.launches}"


def rendezvous_dir(job_id: str, s: LaunchSettings) -> str:
    """Where an elastic job's rounds are published (round.json) and its stores live."""
    return posixpath.join(s.state_dir, "rdzv", job_id)


def interval_path(job_id: str, s: LaunchSettings) -> str:
    """Where the controller publishes a job's checkpoint interval (`checkpoint.every: auto`)."""
    return posixpath.join(s.state_dir, "intervals", f"{job_id}.json")


def interval_env(job: Job, s: LaunchSettings) -> dict[str, str]:
    """The spec's checkpoint interval for the runtime's `Checkpointer.maybe_save`."""
    ck = job.spec.checkpoint
    if ck.every == "auto":
        return {"PERDURE_CHECKPOINT_INTERVAL_FILE": interval_path(job.id, s)}
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
    """The replica's name in a launch id ("" if it is not one of `launch_id`'s: names of
    jobs and pools hold no dots)."""
    parts = launch_id.split(".")
    return parts[2] if len(parts) == 4 else ""


@dataclass(frozen=True)
class PoolBase:
    """What every replica of a pool is launched with, in one launch of its job."""

    command: tuple[str, ...]
    env: dict[str, str]  # the replica's own names are placeholders, set by build_launch
    reports: str  # the launches' report dirs are under it
    logs: str  # the attempt's log dir


def _under(root: str, name: str) -> str:
    """posixpath.join(root, name) for a relative `name`, at a fraction of its cost."""
    return f"{root}{name}" if root.endswith("/") or not root else f"{root}/{name}"


def _runs(keys: list[_K]) -> list[tuple[_K, int]] | None:
    """Each key with how many times it comes in a row, when every key comes in one run
    only (replicas of a node or a pool side by side, as placement and make_replicas put
    them); None otherwise."""
    runs = [(key, len(list(same))) for key, same in itertools.groupby(keys)]
    return runs if len({key for key, _ in runs}) == len(runs) else None


def _positions(at: Mapping[str, str | None], counts: Mapping[str | None, int]
               ) -> dict[str, tuple[int, int]]:
    """Each placed replica's (position among its node's replicas, their number), in `at`'s
    order: in C (groupby, chain) when each node's replicas are side by side, as a 16,384-
    replica job's are; else one pass."""
    mask = list(map(operator.is_not, at.values(), itertools.repeat(None)))
    placed = list(itertools.compress(at, mask))
    runs = _runs(list(itertools.compress(at.values(), mask)))
    if runs is not None:
        spans = [n for _, n in runs]
        place = itertools.chain.from_iterable(map(range, spans))
        size = itertools.chain.from_iterable(map(itertools.repeat, spans, spans))
        return dict(zip(placed, zip(place, size, strict=True), strict=True))
    local, seen = {}, dict.fromkeys(counts, 0)
    for name, node in at.items():
        if node is not None:
            local[name] = (seen[node], counts[node])
            seen[node] += 1
    return local


def _pool_positions(replicas: list[Replica]) -> tuple[dict[str, int], list[int]]:
    """Replicas per pool, and each replica's position among its pool's (rank order)."""
    runs = _runs(list(map(_POOL, replicas)))
    if runs is not None:
        return dict(runs), list(itertools.chain.from_iterable(range(n) for _, n in runs))
    sizes: dict[str, int] = {}
    done = []
    for x in replicas:
        done.append(sizes.get(x.pool, 0))
        sizes[x.pool] = done[-1] + 1
    return sizes, done


@dataclass(frozen=True)
class Layout:
    """Where a job's replicas are, computed once for all replicas launched together (a tick
    launching 1,024 replicas stays linear in them).

    torchrun's "group" (node) is the virtual node for a job of one-process CPU replicas, as
    before; a job with GPUs or with several processes per replica makes each replica its own
    group (GROUP_RANK = the replica's rank), which is what `torch.cuda.set_device(LOCAL_RANK)`
    needs when each replica sees only its own GPUs.
    """

    local: Mapping[str, tuple[int, int]]  # replica -> (LOCAL_RANK, LOCAL_WORLD_SIZE)
    group: Mapping[str, int]  # replica -> GROUP_RANK
    groups: int
    pool_sizes: Mapping[str, int]
    member_rank: Mapping[str, int]  # elastic: this round's rank of each member
    first_rank: Mapping[str, tuple[int, int]]  # replica -> (first RANK, first ROLE_RANK)
    world: int  # WORLD_SIZE: every process of every replica
    devices: Mapping[str, str]  # replica -> CUDA_VISIBLE_DEVICES (absent: leave it alone)
    # pool -> what every replica of it is launched with (build_launch fills it on first use:
    # a launch then costs its own few names, not the whole contract again)
    bases: dict[str, PoolBase] = field(default_factory=dict, compare=False, repr=False)
    # What it was computed for: the job's (attempt, round, master port) and each replica's
    # node; a later launch of the same round with the same nodes reuses it (`fits`).
    key: tuple[int, int, int | None] = field(default=(0, 0, None), compare=False, repr=False)
    at: Mapping[str, str | None] = field(default_factory=dict, compare=False, repr=False)

    def fits(self, job: Job, where: Mapping[str, str]) -> bool:
        """Whether this layout is the one `of` would compute for launching `where` now
        (nothing but those launches moved since: every node change goes through them)."""
        at = self.at
        return (self.key == (job.attempt, job.round, job.master_port)  # (in C: 16,384)
                and all(map(operator.eq, map(at.get, where.keys()), where.values())))

    @staticmethod
    def of(job: Job, nodes: Mapping[str, Node] | None = None,
           launching: Collection[str] | None = None,
           where: Mapping[str, str] | None = None) -> Layout:
        """`launching`: the replicas launched with it (None: all), the only ones given
        CUDA_VISIBLE_DEVICES (a tick that launches a few of 16,384 looks only at those);
        `where`: nodes of replicas placed but not launched yet (their own `node` is unset)."""
        pools = {p.name: p for p in job.spec.pools}
        per_replica = any(p.procs_per_replica > 1 or p.gpus for p in job.spec.pools)
        # Bulk passes (map, zip, Counter) where they can: a 16,384-replica job's layout is
        # built in the tick that places it.
        names = list(map(_NAME, job.replicas))
        at: dict[str, str | None] = dict(zip(names, map(_NODE, job.replicas), strict=True))
        if where:
            at.update(where)
        local: dict[str, tuple[int, int]] = {}
        if per_replica:
            local = {x.name: (0, pools[x.pool].procs_per_replica) for x in job.replicas}
            group = {x.name: x.rank for x in job.replicas}
            groups = len(job.replicas)
        else:
            counts = Counter(at.values())  # first seen first: torchrun's group order
            counts.pop(None, None)
            local = _positions(at, counts)
            order = {node: i for i, node in enumerate(counts)}
            group = dict(zip(at, map(order.get, at.values(), itertools.repeat(0)),
                             strict=True))
            groups = max(1, len(counts))
        procs = list(map(_PROCS, map(pools.__getitem__, map(_POOL, job.replicas))))
        starts = list(itertools.accumulate(procs, initial=0))
        world = starts[-1]
        sizes, done = _pool_positions(job.replicas)
        first = dict(zip(names, zip(starts, map(operator.mul, done, procs), strict=False),
                         strict=True))  # starts: one more, the world size
        return Layout(local, group, groups, sizes, dict(zip(job.members, itertools.count())),
                      first, world, gpu_env(job, nodes or {}, launching),
                      key=(job.attempt, job.round, job.master_port), at=at)

    def env(self, r: Replica) -> dict[str, str]:
        local_rank, local_size = self.local.get(r.name, (0, 0))
        return {
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_size),
            "GROUP_RANK": str(self.group.get(r.name, 0)),
            "GROUP_WORLD_SIZE": str(self.groups),
        }


def gpu_env(job: Job, nodes: Mapping[str, Node],
            launching: Collection[str] | None = None,
            among: list[Replica] | None = None) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES of each placed replica (of those `launching`, or `among`, if
    given): its own GPUs, in its node's names for them; "" (none) for a replica without GPUs
    on a node that has some, unless the spec sets it."""
    out: dict[str, str] = {}
    if among is None and launching is not None and not launching:
        return out  # none launched with it (a layout built ahead of its launches)
    replicas = among if among is not None else job.replicas if launching is None else [
        x for x in job.replicas if x.name in launching]
    for x in replicas:
        node = nodes.get(x.node or "")
        if node is None or not (x.gpus or node.gpus):
            continue  # a CPU replica on a node without GPUs: nothing to set
        names = node.gpu_ids or tuple(str(i) for i in range(node.gpus))
        if x.gpus:
            out[x.name] = ",".join(names[i] if i < len(names) else str(i) for i in x.devices)
        elif node.gpus and not any("CUDA_VISIBLE_DEVICES" in e for e in _user_envs(job, x)):
            out[x.name] = ""
    return out


def _user_envs(job: Job, r: Replica) -> tuple[Mapping[str, str], ...]:
    pool = next(p for p in job.spec.pools if p.name == r.pool)
    return job.spec.env, pool.env


@dataclass(frozen=True)
class ReplicaFacts:
    """One replica's place in its job, as its backend can state it.

    Values are literals on the local backend; an exporter may pass references that its
    platform expands when the process starts (Kubernetes' `$(VAR)`).
    """

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
    """torchrun's environment contract plus perdure's, as every backend hands it to a replica.

    The spec's and the pool's env come first, so the contract's own names always win.
    """
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


def build_launch(job: Job, r: Replica, s: LaunchSettings, layout: Layout | None = None) -> Launch:
    """The Launch decision for replica `r` of `job` as placed now (`layout`: Layout.of(job),
    given when several replicas are launched at once; it keeps what they share)."""
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
    if job.elastic and r.name in layout.member_rank:
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
    )


def _pool_base(job: Job, pool: PoolSpec, s: LaunchSettings, layout: Layout) -> PoolBase:
    """What every replica of `pool` is launched with in this launch of `job`."""
    command = list(pool.command)
    if command[0] in ("python", "python3"):
        command[0] = s.python
    facts = ReplicaFacts(
        rank="", world_size=str(layout.world), role_rank="", master_addr=s.master_addr,
        master_port=str(job.master_port or 0), run_id=f"{job.id}-{job.attempt}",
        attempt=str(job.attempt), round=str(job.round), replica="", restart_count="",
        job_id=job.id, checkpoint_dir=checkpoint_dir(job, s), layout={},
    )
    env = contract_env(job.spec, pool, facts)
    env["PERDURE_NODE"] = env["PERDURE_LAUNCH_ID"] = env["PERDURE_REPORT_DIR"] = ""
    if s.job_secret is not None:
        env["PERDURE_JOB_SECRET"] = s.job_secret(job.id)
    env["PERDURE_MASTER_NODE"] = master_node(job)
    if job.elastic:
        env["PERDURE_RDZV_DIR"] = rendezvous_dir(job.id, s)
        env["PERDURE_MIN_WORLD_SIZE"] = str(job.min_members)
    env.update(interval_env(job, s))
    local = node_dir(job.id, s)
    if local is not None:
        env["PERDURE_NODE_DIR"] = local
    return PoolBase(tuple(command), env, posixpath.join(s.state_dir, "launches"),
                    posixpath.join(s.state_dir, "logs", job.id, f"attempt-{job.attempt}"))
