"""What every `perdure` command shares: the state dir, specs and cluster files, errors."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NoReturn

import typer

from perdure.backends.base import Inspector, NodeInfo
from perdure.cli.terminal import visible
from perdure.core import yamlload
from perdure.core.launchenv import workdir
from perdure.core.model import Job, make_replicas
from perdure.core.records import Node
from perdure.core.scheduler import Capacity, can_ever_fit
from perdure.core.spec import (
    ClusterSpec,
    JobSpec,
    SpecError,
    check_job_fits,
    default_cluster,
    parse_cluster,
    parse_job_spec,
)
from perdure.core.text import plural
from perdure.store.sqlite import JobRefError, Store, StoreError, make_state_dir

CLUSTER_COPY = "cluster.yaml"


def die(message: str, code: int = 2) -> NoReturn:
    # a spec's report is several lines; user values in it are quoted already (repr)
    typer.echo(visible(f"perdure: {message}", one_line=False), err=True)
    raise typer.Exit(code)


@dataclass
class Ctx:
    state_dir: Path
    current: ClassVar[Ctx | None] = None  # the command's, for errors raised outside it

    def __post_init__(self) -> None:
        Ctx.current = self

    def store(self) -> Store:
        """The state dir's store, created (owner-only) when missing."""
        return self._open(create=True)

    def reader(self) -> Store:
        """The store for a read-only command: a missing state dir is an error, not created."""
        return self._open(create=False)

    def _open(self, create: bool) -> Store:
        try:
            return Store(self.state_dir / "perdure.db", create=create)
        except StoreError as exc:
            die(str(exc))

    def resolve(self, store: Store, ref: str) -> str:
        try:
            job_id = store.resolve(ref)
        except JobRefError as exc:
            die(f"{exc}; `perdure ls` lists the jobs")
        if job_id is None:
            die(f"no job {ref!r} in {self.state_dir}; `perdure ls` lists the jobs")
        return job_id


def read_bytes(path: Path, what: str, limits: yamlload.Limits = yamlload.SPEC) -> bytes:
    """The file's bytes, at most what a spec (or `limits`) may hold (`/dev/zero` is not a
    spec)."""
    limit = 4 * limits.text  # bytes: up to 4 per character in UTF-8
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            die(f"{what} {path}: larger than the {limit} bytes such a file may have")
        return data
    except FileNotFoundError:
        die(f"{what} {path}: no such file")
    except OSError as exc:
        die(f"{what} {path}: cannot be read: {exc.strerror}")


def load_spec(path: Path) -> JobSpec:
    try:
        return parse_job_spec(read_bytes(path, "spec"), str(path))
    except SpecError as exc:
        die(str(exc))


def load_cluster(ctx: Ctx, path: Path | None) -> ClusterSpec:
    """The cluster file given, else the one the state dir remembers, else the default."""
    copy = ctx.state_dir / CLUSTER_COPY
    source = path if path is not None else (copy if copy.exists() else None)
    if source is None:
        return default_cluster(os.cpu_count() or 1)
    try:
        return parse_cluster(read_bytes(source, "cluster file"), str(source))
    except SpecError as exc:
        die(str(exc))


def describe_cluster(cluster: ClusterSpec) -> str:
    """One line: the backend, its nodes and slots, the queues and their quotas."""
    nodes = ", ".join(f"{n.name} ({plural(n.slots, 'slot')})" for n in cluster.nodes)
    queues = ", ".join(q.name + (f" (quota {q.quota})" if q.quota is not None else "")
                       for q in cluster.queues)
    where = f"nodes {nodes}" if nodes else "nodes discovered from the cluster"
    return f"backend {cluster.backend}, {where}; queues {queues}"


def remember_cluster(ctx: Ctx, path: Path | None) -> None:
    """Keep a copy of the cluster file given for later commands (call once it is known to
    work: a file that does not must not break every later command)."""
    if path is None:
        return
    text = read_bytes(path, "cluster file")
    make_state_dir(ctx.state_dir)
    copy = ctx.state_dir / CLUSTER_COPY
    tmp = copy.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(text)
    tmp.replace(copy)


def make_job(spec: JobSpec, spec_dir: str, cluster: ClusterSpec) -> Job:
    """A new job of `spec` (relative paths resolve against spec_dir), once it is known to fit
    the cluster and (local backend) its working directory and commands exist; SpecError
    naming the field otherwise."""
    check_job_fits(spec, cluster)
    job_id = f"{spec.name}-{secrets.token_hex(3)}"
    now = time.time()
    job = Job(id=job_id, spec=spec, spec_dir=spec_dir, created=now,
              replicas=make_replicas(spec), updated=now)
    if cluster.backend == "local":
        check_fixed_capacity(job, cluster)
        check_local_launch(job)
    return job


def check_fixed_capacity(job: Job, cluster: ClusterSpec) -> None:
    """A job the local backend's nodes could never hold, even empty, is refused now: waiting
    for capacity is for capacity that is busy or down, not for capacity that does not exist."""
    from perdure.backends.factory import fixed_nodes

    infos = fixed_nodes(cluster)
    cap = Capacity({n.name: Node(n.name, n.slots, gpus=n.gpus or 0) for n in infos}, {}, [])
    if can_ever_fit(job, cap):
        return
    if job.spec.total_gpus:
        _refuse_gpus(job, cap, infos)
    nodes = ", ".join(f"{n.name} ({n.slots})" for n in cluster.nodes)
    widest = max(p.slots for p in job.spec.pools)
    raise SpecError(
        f"pools: the job needs {plural(job.slots, 'slot')} "
        f"({plural(job.spec.total_replicas, 'replica')}, up to {plural(widest, 'slot')} each) "
        f"and the cluster's nodes have {cap.healthy} in all: "
        f"{nodes}. Declare more slots in a cluster file (nodes: [{{name: local, slots: "
        f"{max(job.slots, widest)}}}]) and pass it with --cluster")


def _refuse_gpus(job: Job, cap: Capacity, infos: list[NodeInfo]) -> None:
    """SpecError for a GPU job the nodes could never hold, when GPUs are why."""
    widest = max(p.gpus for p in job.spec.pools)
    most = max((n.gpus or 0 for n in infos), default=0)
    if job.spec.total_gpus <= cap.healthy_gpus and widest <= most:
        return  # GPUs would do: slots (or packing both) are the problem
    nodes = ", ".join(f"{n.name} ({n.gpus or 0})" for n in infos)
    raise SpecError(
        f"pools: the job needs {job.spec.total_gpus} GPUs ({job.spec.total_replicas} replicas, "
        f"up to {widest} GPUs each, all of a replica's on one node) and the cluster's nodes "
        f"have {cap.healthy_gpus} in all, at most {most} on one: {nodes}. Ask for fewer GPUs "
        "per replica, or declare the nodes' GPUs in a cluster file (nodes: [{name: a, slots: "
        f"16, gpus: 8}}]; without `gpus` a node has this host's: CUDA_VISIBLE_DEVICES, else "
        "`nvidia-smi -L`)")


def check_local_launch(job: Job) -> None:
    """What the local backend would refuse at launch, said now: the working directory and
    each pool's executable (looked up as the replica will: relative to the working directory,
    or on the PATH its environment gets)."""
    cwd = workdir(job)
    where = "workdir" if job.spec.workdir else "the spec's directory"
    if not os.path.isdir(cwd):
        raise SpecError(f"{where}: {cwd} is not a directory; create it or fix `workdir`")
    for i, pool in enumerate(job.spec.pools):
        exe = pool.command[0]
        field = f"pools.{i}.command"
        if exe in ("python", "python3"):
            continue  # replaced by the interpreter perdure runs under
        if os.sep in exe:
            path = os.path.join(cwd, exe)
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                problem = "does not exist" if not os.path.exists(path) else "is not executable"
                raise SpecError(f"{field}: {path} {problem} (relative paths start at {where})")
            continue
        path_var = {**os.environ, **job.spec.env, **pool.env}.get("PATH", os.defpath)
        if shutil.which(exe, path=path_var) is None:
            raise SpecError(f"{field}: {exe!r} is not on the replica's PATH ({path_var}); "
                            "give the full path or fix PATH in `env`")


def inspector(ctx: Ctx) -> Inspector:
    """Logs, signals and launch records of the backend this state dir's controller uses."""
    from perdure.backends.factory import make_inspector

    return make_inspector(load_cluster(ctx, None), ctx.state_dir)


def new_job(spec: JobSpec, spec_path: Path, cluster: ClusterSpec,
            state_dir: Path | None = None) -> Job:
    from perdure.backends.ray.checks import check_shared_checkpoint

    try:
        if state_dir is not None:
            check_shared_checkpoint(spec, str(spec_path.resolve().parent),
                                    os.path.realpath(state_dir), cluster)
        return make_job(spec, str(spec_path.resolve().parent), cluster)
    except SpecError as exc:
        die(f"{spec_path}: {exc}")


def python() -> str:
    return sys.executable


def node_dir(state_dir: Path, shm: Path = Path("/dev/shm")) -> str | None:
    """The node-local tmpfs directory for the jobs of `state_dir` (each gets a subdirectory,
    removed when the job ends), made private to this user; None where there is no tmpfs or
    the name is taken by something this user does not own (nothing is then kept there)."""
    if not shm.is_dir():
        return None
    tag = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    path = shm / f"perdure-{os.getuid()}-{tag}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return str(path)
