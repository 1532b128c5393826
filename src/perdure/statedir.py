"""The state dir's contract: every path and file name in it, and the one atomic write.

A state dir (`--state-dir`) holds the job store, the controller's lock and files, a directory
per launch (`launches/<launch id>/`), each job's logs, rendezvous, interval and default
checkpoints. A launch dir holds records each written by one side only, always atomically.
Every file here is created 0600 and every directory 0700 (`private_dirs`): a launch record
holds the job's `env`, which may hold API keys and holds the job's secret.

Paths are strings or os.PathLike; only small standard modules are imported: the
supervisor imports this on every replica start, the runtime in every training process.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs start-up time; annotations only
    from collections.abc import Iterable
    from typing import Any

    PathLike = str | os.PathLike[str]

# ---- in the state dir
DB = "perdure.db"  # the job store (sqlite)
LOCK = "controller.lock"  # held by the running controller
CLUSTER_COPY = "cluster.yaml"  # the cluster file last given
SECRET = "secret"  # the state dir's secret
TOKEN = "api-token"  # the HTTP API's token
RELAY = "relay.json"  # where the relay listens
LAUNCHES = "launches"  # launches/<launch id>/: one launch (below)
WARM_STATUS = ".warm.json"  # launches/.warm.json: the warm pool's status
EARLY_LOG = ".supervisors.log"  # launches/: what supervisors print before their own log
LOGS = "logs"  # logs/<job>/attempt-<n>/<replica>.{out,err,log,stacks}
INTERVALS = "intervals"  # intervals/<job>.json: the interval the controller chose (`auto`)
CHECKPOINTS = "checkpoints"  # checkpoints/<job>/: when the spec names no directory
RDZV = "rdzv"  # rdzv/<job>/: an elastic job's round.json, its replicas' markers and stores
ROUND = "round.json"
SLURM = "slurm"  # the Slurm backend's: its allocations, log, node agents' hub and secret
ALLOCS, SLURM_LOG, HUB, SLURM_SECRET = "allocs.json", "slurm.log", "hub.json", "secret.json"

# ---- in a launch dir, each written by one side
LAUNCH = "launch.json"  # what to run (backend, before the supervisor starts)
# Who owns the launch, created once and never replaced (`claim`): the supervisor before it
# starts the replica, or a restarted controller as abandoned (then the supervisor starts
# nothing).
CLAIM = "claim.json"
STATUS = "status.json"  # the replica's process and its memory limit (supervisor, once started)
STOP = "stop.json"  # the stop signal and the absolute kill deadline (backend, on stop)
EXIT = "exit.json"  # how the replica ended, or why it could not start (supervisor, last)
ERROR = "error.json"  # the replica's own error file (the script, through perdure.runtime)
PROGRESS = "progress.jsonl"  # the runtime's progress records, appended one write at a time
PROGRESS_ACKED = ".progress-acked"  # the relay's last batch appended: (client, sequence)
SUPERVISOR_LOG = "supervisor.log"  # the supervisor's own stdout and stderr
# A remote replica's output, where a node agent keeps it
STREAMS = {"out": "stdout.log", "err": "stderr.log", "log": "output.log"}
MIRROR = "mirror.json"  # how far the Ray backend's mirror has copied it


def launch_dir(state_dir: PathLike, launch_id: str) -> str:
    """The directory of one launch."""
    return os.path.join(state_dir, LAUNCHES, launch_id)


def log_dir(state_dir: PathLike, job_id: str, attempt: int) -> str:
    """Where an attempt's replicas' output goes: `<replica>.out`, `.err`, `.log`, `.stacks`."""
    return os.path.join(state_dir, LOGS, job_id, f"attempt-{attempt}")


def rendezvous_dir(state_dir: PathLike, job_id: str) -> str:
    """Where an elastic job's rounds are published (round.json) and its stores live."""
    return os.path.join(state_dir, RDZV, job_id)


def interval_path(state_dir: PathLike, job_id: str) -> str:
    """Where the controller publishes a job's checkpoint interval (`checkpoint.every: auto`)."""
    return os.path.join(state_dir, INTERVALS, f"{job_id}.json")


def checkpoints_dir(state_dir: PathLike, job_id: str) -> str:
    """A job's checkpoints when its spec names no directory."""
    return os.path.join(state_dir, CHECKPOINTS, job_id)


def private_dirs(path: PathLike) -> None:
    """Create directory `path` and any missing parent, each 0700 (os.makedirs gives the mode
    to the last one only)."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    private_dirs(os.path.dirname(path))
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)


def write_atomically(path: PathLike, data: str | bytes | Iterable[bytes | memoryview], *,
                     durable: bool = False, mode: int = 0o600) -> None:
    """Write `data` to `path` so that a reader sees the old file or the new one, never a part:
    a temporary file beside it (`.<name>.<pid>.<thread>.tmp`, created with `mode`), then a
    rename. durable: fsync the file before the rename, for what must survive a power cut, not
    only a killed process."""
    directory, name = os.path.split(os.fspath(path))
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
    if isinstance(data, str):
        data = data.encode()
    chunks = [data] if isinstance(data, bytes) else data
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: PathLike, record: dict[str, Any]) -> None:
    """Write a record atomically (no fsync: records must survive a killed process, not a
    power cut)."""
    write_atomically(path, json.dumps(record))


def read_json(path: PathLike) -> dict[str, Any] | None:
    """Read a record; None when it does not exist (yet) or is not a JSON object."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def claim(directory: PathLike, data: dict[str, Any]) -> dict[str, Any]:
    """Claim a launch with `data` unless it was claimed already; the claim in force.

    Atomic (a hard link, which fails if the name exists): exactly one claimant wins.
    """
    path = os.path.join(directory, CLAIM)
    tmp = os.path.join(directory, f".{CLAIM}.{os.getpid()}.tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w",
                   encoding="utf-8") as f:
        f.write(json.dumps(data))
    try:
        os.link(tmp, path)
        return data
    except FileExistsError:
        return read_json(path) or {}
    finally:
        os.unlink(tmp)


def stop_record(sig: int, grace: float, reason: str, notice: str | None,
                delay: float = 0.0) -> dict[str, Any]:
    """stop.json: `sig` at `signal_at` (now, or after `delay`), SIGKILL at `deadline`. Read by
    the supervisor, and by the replica's runtime ($PERDURE_STOP_FILE) to tell a notice."""
    import time

    now = time.time()
    return {"signal": int(sig), "signal_at": now + delay, "deadline": now + delay + grace,
            "reason": reason, "notice": notice}
