"""The state dir's contract: every path and file name in it, and the one atomic write.

A state dir (`--state-dir`) holds:

- `perdure.db`: the job store (sqlite); `controller.lock`: held by the running controller;
- `cluster.yaml`: the cluster file last given; `secret`: the state dir's secret;
  `api-token`: the HTTP API's token; `relay.json`: where the relay listens;
- `launches/<launch id>/`: one launch (below); `launches/.warm.json`: the warm pool's status;
  `launches/.supervisors.log`: what supervisors print before they open their own log;
- `logs/<job>/attempt-<n>/<replica>.{out,err,log,stacks}`: a replica's output and stacks;
- `rdzv/<job>/`: an elastic job's `round.json`, its replicas' markers and stores;
- `intervals/<job>.json`: the checkpoint interval the controller chose (`every: auto`);
- `checkpoints/<job>/`: a job's checkpoints when its spec names no directory;
- `slurm/`: the Slurm backend's own: `allocs.json` (its allocations), `slurm.log`, `hub.json`
  (where its node agents connect) and `secret.json` (theirs).

A launch dir holds records each written by one side only, always atomically:

- `launch.json`: what to run (backend, before the supervisor starts);
- `claim.json`: who owns the launch, created once and never replaced: the supervisor claims
  it before starting the replica, or a restarted controller claims it as abandoned (its
  supervisor never started), and a supervisor that finds it abandoned starts nothing;
- `status.json`: the replica's process and how its memory is limited (supervisor, once started);
- `stop.json`: the stop signal and the absolute kill deadline (backend, on stop);
- `exit.json`: how the replica ended, or why it could not start (supervisor, last thing);
- `error.json`: the replica's own error file (the training script, through perdure.runtime);
- `progress.jsonl`: the runtime's progress records, appended one write at a time (and
  `.progress-acked`: the relay's last batch appended for a remote replica);
- `supervisor.log`: the supervisor's own stdout and stderr;
- `stdout.log`, `stderr.log`, `output.log`: a remote replica's output, where a node agent
  keeps it; `mirror.json`: how far the Ray backend's mirror has copied it.

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

DB = "perdure.db"
LOCK = "controller.lock"
CLUSTER_COPY = "cluster.yaml"
SECRET = "secret"
TOKEN = "api-token"
RELAY = "relay.json"
LAUNCHES = "launches"
WARM_STATUS = ".warm.json"
EARLY_LOG = ".supervisors.log"
LOGS = "logs"
INTERVALS = "intervals"
CHECKPOINTS = "checkpoints"
RDZV = "rdzv"
ROUND = "round.json"
SLURM = "slurm"
ALLOCS, SLURM_LOG, HUB, SLURM_SECRET = "allocs.json", "slurm.log", "hub.json", "secret.json"

LAUNCH = "launch.json"
CLAIM = "claim.json"
STATUS = "status.json"
STOP = "stop.json"
EXIT = "exit.json"
ERROR = "error.json"
PROGRESS = "progress.jsonl"
PROGRESS_ACKED = ".progress-acked"  # the relay's last batch appended: (client, sequence)
SUPERVISOR_LOG = "supervisor.log"
STREAMS = {"out": "stdout.log", "err": "stderr.log", "log": "output.log"}
MIRROR = "mirror.json"


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
