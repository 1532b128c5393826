"""The environment of each local rank of a replica that runs several processes.

A launch's environment is local rank 0's; local rank k differs in LOCAL_RANK (k), RANK and
ROLE_RANK (first + k), as torchrun's `--nproc-per-node` sets them. Only the standard library
(the supervisor imports it on every start).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the supervisor start-up time; annotations only
    from collections.abc import Mapping

PROCS_ENV = "PERDURE_PROCS_PER_REPLICA"  # set only when more than 1
GPUS_ENV = "PERDURE_GPUS"  # the replica's GPU count, set only when it has some


def env_int(name: str, default: int) -> int:
    """The integer in environment variable `name`, `default` when it is unset or empty."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def procs_of(env: dict[str, str]) -> int:
    """How many local ranks a launch with this environment runs (1 when unset or bad)."""
    try:
        return max(1, int(env.get(PROCS_ENV, "1")))
    except ValueError:
        return 1


def process_name(replica: str, env: Mapping[str, str]) -> str:
    """A name for this process's own files (node-local snapshots): its replica's, and for a
    replica of several processes one per local rank (`worker-1.rank1`), so that they do not
    overwrite each other's."""
    if env.get(PROCS_ENV) is None:
        return replica
    return f"{replica}.rank{env.get('LOCAL_RANK', '0')}"


def local_rank_env(env: dict[str, str], local_rank: int) -> dict[str, str]:
    """The environment of local rank `local_rank` of the replica whose launch has `env`."""
    if local_rank == 0:
        return dict(env)
    out = dict(env)
    out["LOCAL_RANK"] = str(local_rank)
    for name in ("RANK", "ROLE_RANK"):
        if out.get(name, "").isdigit():
            out[name] = str(int(out[name]) + local_rank)
    return out


def device_index(local_rank: int, local_world_size: int, gpus: int) -> int:
    """The first CUDA device (an index into CUDA_VISIBLE_DEVICES) of a local rank: each rank
    owns gpus / local_world_size consecutive devices; with fewer GPUs than ranks they are
    shared round-robin (a spec cannot ask for that; a script run by hand can)."""
    if gpus <= 0:
        return 0
    per = gpus // local_world_size if local_world_size and gpus >= local_world_size else 0
    return local_rank * per if per else local_rank % gpus


def rank_file(name: str, local_rank: int) -> str:
    """A per-process file of a launch: `error.json` for local rank 0, `error.k.json` for k."""
    if local_rank == 0:
        return name
    stem, dot, ext = name.rpartition(".")
    return f"{stem}.{local_rank}.{ext}" if dot else f"{name}.{local_rank}"
