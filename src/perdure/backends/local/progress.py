"""Progress of local replicas: what their runtime appended to `progress.jsonl` since last read.

Read at most every CHECK_SECONDS (one stat when nothing is new), and once more at the exit
(`final`), so what a replica wrote just before its exit arrives before the exit does.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from perdure import statedir
from perdure.core.events import ReplicaProgress

CHECK_SECONDS = 0.5


class ProgressReader:
    """Remembers how far each launch's progress file was read."""

    def __init__(self) -> None:
        self._offsets: dict[str, int] = {}
        self._steps: dict[str, int] = {}
        self._next: dict[str, float] = {}

    def read(self, launch_id: str, directory: str, now: float,
             final: bool = False) -> ReplicaProgress | None:
        """New progress of one launch since the last read (None: nothing new, or too soon)."""
        if now < self._next.get(launch_id, 0.0) and not final:
            return None
        self._next[launch_id] = now + CHECK_SECONDS
        path = os.path.join(directory, statedir.PROGRESS)
        offset = self._offsets.get(launch_id, 0)
        try:
            if os.stat(path).st_size <= offset:
                return None
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except OSError:
            return None
        whole = chunk[: chunk.rfind(b"\n") + 1]  # a line being appended is read next time
        self._offsets[launch_id] = offset + len(whole)
        return self._summarize(launch_id, whole)

    def _summarize(self, launch_id: str, data: bytes) -> ReplicaProgress | None:
        steps, seconds, save = 0, 0.0, None
        restores: list[str] = []
        notes: list[str] = []
        failed: dict[str, Any] = {}
        step = self._steps.get(launch_id)
        for line in data.splitlines():
            rec = json_record(line)
            kind = rec.get("kind")
            if kind in _SAVE_OUTCOMES:
                failed = _save_outcome(rec)
                step = failed.pop("step", step)
            elif kind == "steps":
                steps += int(rec.get("count", 0))
                seconds += float(rec.get("seconds", 0.0))
                step = int(rec["last"])
            elif kind == "checkpoint_save":
                if rec.get("what") != "snapshot":  # a snapshot's copy is not a save's cost
                    save = max(save or 0.0, float(rec.get("seconds", 0.0)))
                step = int(rec.get("step", step or 0))
            elif kind == "restore":
                restores.append(str(rec.get("source", "")))
                if rec.get("step") is not None:
                    step = int(rec["step"])
            elif kind == "note":
                notes.append(str(rec.get("message", "")))
        if step is None and not notes:
            return None  # nothing that says where training is (start, data waits)
        if step is not None:
            self._steps[launch_id] = step
        return ReplicaProgress(launch_id, step, time.time(), steps,
                               seconds / steps if steps else None, save, tuple(notes), **failed,
                               restores=tuple(restores))

    def forget(self, launch_id: str) -> None:
        for d in (self._offsets, self._steps, self._next):
            d.pop(launch_id, None)


_SAVE_OUTCOMES = ("checkpoint_failed", "checkpoint_committed")


def _save_outcome(rec: dict[str, Any]) -> dict[str, Any]:
    """ReplicaProgress's failed-save fields from a checkpoint_failed (or _committed) record."""
    try:
        if rec.get("kind") == "checkpoint_committed":
            return {"failed_saves": 0, "step": int(rec["step"])}
        return {"failed_saves": int(rec.get("consecutive", 1)), "step": int(rec["step"]),
                "save_error": f"step {rec.get('step')}: {str(rec.get('error', ''))[:2000]}",
                "alert_after": int(rec.get("alert_after", 3))}
    except (KeyError, TypeError, ValueError):  # a malformed record says nothing
        return {}


def json_record(line: bytes) -> dict[str, Any]:
    try:
        rec = json.loads(line)
    except ValueError:
        return {}
    return rec if isinstance(rec, dict) else {}
