"""A new job from a spec, refused now (SpecError naming the field) when it could never run:
what `perdure submit`, `run` and `POST /jobs` share."""

from __future__ import annotations

import os
import secrets
import shutil
import time

from perdure.backends.base import NodeInfo
from perdure.backends.ray.checks import check_shared_checkpoint
from perdure.core.clusterspec import ClusterSpec, check_job_fits
from perdure.core.launchenv import workdir
from perdure.core.model import Job
from perdure.core.records import Node
from perdure.core.replica import make_replicas
from perdure.core.scheduler import Capacity, can_ever_fit
from perdure.core.spec import JobSpec
from perdure.core.specread import SpecError
from perdure.core.text import plural


def make_job(spec: JobSpec, spec_dir: str, cluster: ClusterSpec, state_dir: str) -> Job:
    """A new job of `spec` (relative paths resolve against spec_dir); SpecError naming the
    field when it could never run."""
    check_job_fits(spec, cluster)
    check_shared_checkpoint(spec, spec_dir, os.path.realpath(state_dir), cluster)
    job_id = f"{spec.name}-{secrets.token_hex(3)}"
    now = time.time()
    job = Job(id=job_id, spec=spec, spec_dir=spec_dir, created=now,
              replicas=make_replicas(spec), updated=now)
    if cluster.backend == "local":
        check_fixed_capacity(job, cluster)
        check_local_launch(job)
    return job


def check_fixed_capacity(job: Job, cluster: ClusterSpec) -> None:
    """Refuse a job the local nodes could never hold, even empty."""
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
    each pool's executable, looked up as the replica will."""
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
