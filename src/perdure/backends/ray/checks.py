"""The checkpoint dir of a job on other hosts: a URL every node reaches, or under the cluster
file's `shared_dirs` (no shared filesystem is assumed). No side effects.
"""

from __future__ import annotations

import posixpath

from perdure import statedir
from perdure.core.clusterspec import ClusterSpec
from perdure.core.spec import JobSpec
from perdure.core.specread import SpecError


def check_shared_checkpoint(spec: JobSpec, spec_dir: str, state_dir: str,
                            cluster: ClusterSpec) -> None:
    """Raise SpecError when a Ray job's checkpoints would land on one machine only."""
    if cluster.backend not in ("ray", "slurm"):
        return
    raw = spec.checkpoint.dir
    if raw and "://" in raw and not raw.startswith("file://"):
        return
    if raw:
        path = raw.removeprefix("file://")
        path = path if posixpath.isabs(path) else posixpath.join(spec_dir, path)
    else:
        path = posixpath.join(state_dir, statedir.CHECKPOINTS)
    path = posixpath.normpath(path)
    section = cluster.ray if cluster.backend == "ray" else cluster.slurm
    shared = [posixpath.normpath(d) for d in (section.shared_dirs if section else [])]
    if any(path == d or path.startswith(d.rstrip("/") + "/") for d in shared):
        return
    where = f"checkpoint.dir {raw!r}" if raw else "the default checkpoint dir"
    raise SpecError(
        f"checkpoint.dir: {where} is {path}, a path on the controller's machine only; on "
        f"{cluster.backend} the replicas run on other hosts and could not read it. Use a URL "
        "every node reaches (s3://..., gs://...) or a path under one of the cluster file's "
        f"`{cluster.backend}: shared_dirs` "
        f"(now {shared or 'none'}): a filesystem mounted at the same place on every node"
    )
