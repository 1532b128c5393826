"""The files a launch leaves in `<state_dir>/launches/<launch_id>/`, and how they are written.

Each record is written by one side only and always atomically (a temporary file in the same
directory, then rename), so a reader sees a whole record or none:

- `launch.json`: what to run (backend, before the supervisor starts);
- `claim.json`: who owns the launch, created once and never replaced: the supervisor claims
  it before starting the replica, or a restarted controller claims it as abandoned (its
  supervisor never started), and a supervisor that finds it abandoned starts nothing;
- `status.json`: the replica's process and how its memory is limited (supervisor, once started);
- `stop.json`: the stop signal and the absolute kill deadline (backend, on stop);
- `exit.json`: how the replica ended, or why it could not start (supervisor, last thing);
- `error.json`: the replica's own error file (the training script, through perdure.runtime);
- `supervisor.log`: the supervisor's own stdout and stderr (before it opens it, what it
  prints goes to `launches/.supervisors.log`, shared by all).

Every file here is created 0600 and every directory 0700 (`private_dirs`): a launch record
holds the job's `env`, which may hold API keys and holds the job's secret.

Paths are strings or os.PathLike; only `json` and `os` are imported: the supervisor imports
this on every replica start.
"""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs start-up time; annotations only
    from typing import Any

    PathLike = str | os.PathLike[str]

LAUNCHES = "launches"
LAUNCH = "launch.json"
CLAIM = "claim.json"
STATUS = "status.json"
STOP = "stop.json"
EXIT = "exit.json"
ERROR = "error.json"
SUPERVISOR_LOG = "supervisor.log"
EARLY_LOG = ".supervisors.log"


def launch_dir(state_dir: PathLike, launch_id: str) -> str:
    """The directory of one launch."""
    return os.path.join(state_dir, LAUNCHES, launch_id)


def private_dirs(path: PathLike) -> None:
    """Create directory `path` and any missing parent, each 0700 (os.makedirs gives the mode
    to the last one only)."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    private_dirs(os.path.dirname(path))
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return


def _create(path: str) -> Any:
    """Open `path` for writing, created 0600 (or truncated)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    return os.fdopen(fd, "w", encoding="utf-8")


def write_json(path: PathLike, data: dict[str, Any]) -> None:
    """Write `data` to `path` atomically (temporary file + rename; no fsync: the records must
    survive a killed process, not a power cut)."""
    directory, name = os.path.split(os.fspath(path))
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    with _create(tmp) as f:
        f.write(json.dumps(data))
    os.replace(tmp, path)


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
    with _create(tmp) as f:
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
