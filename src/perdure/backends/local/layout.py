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


def write_json(path: PathLike, data: dict[str, Any]) -> None:
    """Write `data` to `path` atomically (temporary file + rename; no fsync: the records must
    survive a killed process, not a power cut)."""
    directory, name = os.path.split(os.fspath(path))
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
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
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(data))
    try:
        os.link(tmp, path)
        return data
    except FileExistsError:
        return read_json(path) or {}
    finally:
        os.unlink(tmp)
