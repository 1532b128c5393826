"""Read what replicas reported (progress.jsonl in their launch dirs) and account goodput."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from perdure.backends.local import layout
from perdure.core.goodput import Goodput, LaunchReport, account
from perdure.core.model import Job
from perdure.store.sqlite import StoredEvent

STATE_KINDS = ("state", "running")


def _records(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill: the rest still counts
        if isinstance(rec, dict):
            out.append(rec)
    return out


def primary_launches(state_dir: Path, job: Job) -> list[LaunchReport]:
    out = []
    root = state_dir / layout.LAUNCHES
    for d in sorted(root.glob(f"{job.id}.*.{job.primary.name}.*")):
        status = layout.read_json(d / layout.STATUS) or {}
        exit_ = layout.read_json(d / layout.EXIT) or {}
        started = status.get("started_at")
        if started is None:
            continue
        out.append(LaunchReport(float(started), exit_.get("time"),
                                _records(d / "progress.jsonl")))
    return out


def goodput(state_dir: Path, job: Job, events: list[StoredEvent]) -> Goodput:
    timeline = [(e.time, e.message.split(":", 1)[0]) for e in events if e.kind in STATE_KINDS]
    return account(primary_launches(state_dir, job), timeline, time.time())


def format_goodput(g: Goodput) -> list[str]:
    if g.goodput is None:
        return ["Goodput: not started"]
    lines = [f"Goodput: {g.goodput:.1%} ({g.productive:.1f}s productive of {g.running:.1f}s "
             f"running; last step {g.last_step})"]
    for k, v in g.badput.items():
        lines.append(f"  badput {k:<19} {v:8.1f}s")
    lines.append(f"  queued {g.queued:.1f}s, suspended {g.suspended:.1f}s (not counted)")
    return lines
