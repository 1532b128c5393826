"""What every `perdure` command shares: the state dir, specs and cluster files, errors."""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import typer

from perdure.core.model import Job, make_replicas
from perdure.core.spec import (
    ClusterSpec,
    JobSpec,
    SpecError,
    check_job_fits,
    default_cluster,
    parse_cluster,
    parse_job_spec,
)
from perdure.store.sqlite import Store

CLUSTER_COPY = "cluster.yaml"


def die(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"perdure: {message}", err=True)
    raise typer.Exit(code)


@dataclass
class Ctx:
    state_dir: Path

    def store(self) -> Store:
        return Store(self.state_dir / "perdure.db")

    def resolve(self, store: Store, ref: str) -> str:
        job_id = store.resolve(ref)
        if job_id is None:
            die(f"no job {ref!r} in {self.state_dir}; `perdure ls` lists the jobs")
        return job_id


def read_text(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        die(f"{what} {path}: no such file")
    except OSError as exc:
        die(f"{what} {path}: cannot be read: {exc.strerror}")


def load_spec(path: Path) -> JobSpec:
    try:
        return parse_job_spec(read_text(path, "spec"), str(path))
    except SpecError as exc:
        die(str(exc))


def load_cluster(ctx: Ctx, path: Path | None, *, remember: bool = False) -> ClusterSpec:
    """The cluster file given, else the one the state dir remembers, else the default."""
    copy = ctx.state_dir / CLUSTER_COPY
    source = path if path is not None else (copy if copy.exists() else None)
    if source is None:
        return default_cluster(os.cpu_count() or 1)
    text = read_text(source, "cluster file")
    try:
        cluster = parse_cluster(text, str(source))
    except SpecError as exc:
        die(str(exc))
    if remember and path is not None:
        ctx.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = copy.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(copy)
    return cluster


def new_job(spec: JobSpec, spec_path: Path, cluster: ClusterSpec) -> Job:
    try:
        check_job_fits(spec, cluster)
    except SpecError as exc:
        die(f"{spec_path}: {exc}")
    job_id = f"{spec.name}-{secrets.token_hex(3)}"
    now = time.time()
    return Job(id=job_id, spec=spec, spec_dir=str(spec_path.resolve().parent), created=now,
               replicas=make_replicas(spec), updated=now)


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
