"""How a job reads to a person, the same in `describe`, `ls`, `run` and the API.

The step shown everywhere is the goodput account's, so the list and a job's page agree on it.
"""

from __future__ import annotations

import signal
from datetime import datetime
from typing import Any

from perdure.core.goodput import Goodput
from perdure.core.model import Job
from perdure.core.replica import Replica
from perdure.core.states import JobState, ReplicaState

FINAL_ERROR_STATES = (JobState.FAILED, JobState.CANCELLED)  # in others: recovered from


def errors_json(job: Job) -> dict[str, Any]:
    """`error`: why the job failed or was cancelled; `last_failure`: a failure it recovered
    from (restart, retry) while it runs or after it succeeded; the other one None."""
    return stored_errors(job.state, job.error.to_json() if job.error else None)


def stored_errors(state: JobState, error: dict[str, Any] | None) -> dict[str, Any]:
    """`errors_json` from a job's state and its stored error."""
    if error is None:
        return {"error": None, "last_failure": None}
    if state in FINAL_ERROR_STATES:
        return {"error": error, "last_failure": None}
    return {"error": None, "last_failure": {**error, "recovered": True}}


def queue_reason(job: Job) -> str | None:
    return job.backend_queue if job.in_backend_queue else None


def error_line(d: dict[str, Any]) -> str | None:
    if d.get("error"):
        return f"Error: {d['error']['code']}: {d['error']['message']}"
    if d.get("last_failure"):
        f = d["last_failure"]
        return f"Last failure (recovered): {f['code']}: {f['message']}"
    return None


def step(g: Goodput, job: Job) -> int | None:
    """The training step reached: the accounted replica's, else the controller's last report."""
    return g.last_step if g.last_step is not None else job.step


def progress_json(g: Goodput, job: Job) -> dict[str, Any]:
    return {"step": step(g, job), "total_steps": g.total_steps, "goodput": g.goodput,
            "goodput_status": g.status}


def missing_replica(job: Job, name: str) -> str | None:
    if any(r.name == name for r in job.replicas):
        return None
    return (f"job {job.id} has no replica {name!r}; it has "
            f"{', '.join(r.name for r in job.replicas)}")


def clock(t: float, ms: bool = True) -> str:
    """`14:03:27.512` (`ms=False`: `14:03:27`), local time."""
    text = datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")
    return text[:-3] if ms else text[:8]


def step_text(current: int | None, total: int | None) -> str:
    """`160 / 6000`, `160`, or `-` before any step."""
    if current is None:
        return "-"
    return f"{current} / {total}" if total is not None else str(current)


def replica_status(r: Replica) -> str:
    """`running`, `finished`, `exited 1`, `exited 137 (SIGKILL)`, `waiting`, ..."""
    if r.state is not ReplicaState.EXITED or r.exit_code is None:
        return r.state.value.lower()
    if r.exit_code == 0:
        return "finished"
    text = f"exited {r.exit_code}"
    if r.exit_code > 128 and r.exit_code - 128 in SIGNAL_NAMES:
        text += f" ({SIGNAL_NAMES[r.exit_code - 128]})"
    return text


SIGNAL_NAMES = {int(s): s.name for s in signal.Signals}


def replica_json(r: Replica) -> dict[str, Any]:
    return {"name": r.name, "pool": r.pool, "index": r.index, "rank": r.rank,
            "state": r.state.value, "status": replica_status(r), "restarts": r.restarts,
            "restarts_total": r.total_restarts, "exit_code": r.exit_code, "node": r.node,
            "pid": r.pid}


def replica_line(r: dict[str, Any]) -> str:
    restarts = f"restarts {r['restarts']}"
    if r["restarts_total"] != r["restarts"]:
        restarts += f" ({r['restarts_total']} in all attempts)"
    return (f"  {r['name']:<14} rank {r['rank']:<3} {r['status']:<22} node "
            f"{r['node'] or '-':<8} {restarts}")


def duration(seconds: float | None) -> str:
    """`45s`, `3m12s`, `2h05m`; `-` for None."""
    if seconds is None:
        return "-"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
