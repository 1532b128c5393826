"""`perdure describe`'s watchdog part, from the job's events: hang verdicts, stragglers, and
the checkpoint interval chosen for `every: auto`."""

from __future__ import annotations

from typing import Any

from perdure.store.schema import StoredEvent
from perdure.views.jobview import clock

INTERVAL_PREFIX = "checkpoint interval "


def watchdog_json(events: list[StoredEvent]) -> dict[str, Any]:
    hangs = [{"time": e.time, "report": e.message} for e in events if e.kind == "watchdog"]
    stragglers = [{"time": e.time, "report": e.message} for e in events
                  if e.kind == "straggler"]
    intervals = [e for e in events
                 if e.kind == "checkpoint" and e.message.startswith(INTERVAL_PREFIX)]
    last = intervals[-1] if intervals else None
    return {
        "hangs": hangs,
        "stragglers": stragglers,
        "checkpoint_interval": None if last is None else {
            "chosen": last.message.removeprefix(INTERVAL_PREFIX), "since": last.time,
            "changes": len(intervals)},
    }


def format_watchdog(d: dict[str, Any]) -> list[str]:
    lines = []
    ci = d.get("checkpoint_interval")
    if ci:
        lines.append(f"Checkpoint interval (every: auto; {ci['changes']} published, last at "
                     f"{clock(ci['since'], ms=False)}): {ci['chosen']}")
    for h in d.get("hangs", []):
        lines.append(f"Hang at {clock(h['time'], ms=False)}: {h['report']}")
    for s in d.get("stragglers", []):
        lines.append(f"Straggler at {clock(s['time'], ms=False)}: {s['report']}")
    return lines
