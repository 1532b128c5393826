"""What every `perdure` command shares: the state dir, specs and cluster files, errors."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NoReturn

import typer

from perdure import statedir
from perdure.backends.base import Inspector
from perdure.cli.terminal import visible
from perdure.controller.newjob import make_job
from perdure.core import yamlload
from perdure.core.clusterspec import ClusterSpec, default_cluster, parse_cluster
from perdure.core.model import Job
from perdure.core.spec import JobSpec, parse_job_spec
from perdure.core.specread import SpecError
from perdure.core.text import plural
from perdure.store.files import make_state_dir
from perdure.store.schema import JobRefError, StoreError
from perdure.store.sqlite import Store


def die(message: str) -> NoReturn:
    """The error on stderr and exit 2, from a command or around the whole CLI."""
    # a spec's report is several lines; user values in it are quoted already (repr)
    typer.echo(visible(f"perdure: {message}", one_line=False), err=True)
    raise SystemExit(2)


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
            return Store(self.state_dir / statedir.DB, create=create)
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
    copy = ctx.state_dir / statedir.CLUSTER_COPY
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
    copy = ctx.state_dir / statedir.CLUSTER_COPY
    statedir.write_atomically(copy, text)


def inspector(ctx: Ctx) -> Inspector:
    """Logs, signals and launch records of the backend this state dir's controller uses."""
    from perdure.backends.factory import make_inspector

    return make_inspector(load_cluster(ctx, None), ctx.state_dir)


def new_job(spec: JobSpec, spec_path: Path, cluster: ClusterSpec, state_dir: Path) -> Job:
    try:
        return make_job(spec, str(spec_path.resolve().parent), cluster, str(state_dir))
    except SpecError as exc:
        die(f"{spec_path}: {exc}")


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
