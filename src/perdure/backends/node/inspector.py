"""The local backend's inspector (`perdure.backends.base.Inspector`): reads the state dir only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from perdure import statedir
from perdure.backends.base import LaunchRecord, Stream
from perdure.backends.local.progress import json_record
from perdure.backends.node.replicas import signal_replica

READ_CHUNK = 1 << 20


class LocalInspector:
    """Reads the files the local backend (and the Ray backend's mirror) keep in a state dir."""

    def __init__(self, state_dir: Path | str) -> None:
        self.state_dir = Path(os.path.realpath(state_dir))

    def pool_summary(self) -> str | None:
        from perdure.backends.node.pool import summary

        return summary(self.state_dir)

    def read_log(self, job_id: str, attempt: int, replica: str, stream: Stream,
                 offset: int) -> bytes | None:
        path = Path(statedir.log_dir(self.state_dir, job_id, attempt)) / f"{replica}.{stream}"
        try:
            with path.open("rb") as f:
                f.seek(offset)
                return f.read(READ_CHUNK)
        except FileNotFoundError:
            return None

    def signal(self, launch_id: str, sig: int) -> int:
        return signal_replica(self.state_dir, launch_id, sig)

    def launch_records(self, job_id: str, replica: str) -> list[LaunchRecord]:
        out = []
        root = self.state_dir / statedir.LAUNCHES
        for d in sorted(root.glob(f"{job_id}.*.{replica}.*"), key=_launch_order):
            status = statedir.read_json(d / statedir.STATUS) or {}
            exit_ = statedir.read_json(d / statedir.EXIT) or {}
            started = status.get("started_at")
            if started is None:
                continue
            # From launch.json: startup counts a launch held for a warm standby too.
            try:
                launched = min(float(started), (d / statedir.LAUNCH).stat().st_mtime)
            except OSError:
                launched = float(started)
            exited = exit_.get("time")
            out.append(LaunchRecord(d.name, launched, float(started),
                                    None if exited is None else float(exited),
                                    _progress_records(d / statedir.PROGRESS)))
        return out


def _progress_records(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return []
    return [rec for line in lines if (rec := json_record(line))]  # a line cut by a kill: skipped


def _launch_order(d: Path) -> tuple[int, int, str]:
    """job.attempt.replica.launches: by attempt, then launch count (numbers, not text)."""
    parts = d.name.split(".")
    try:
        return int(parts[1]), int(parts[-1]), d.name
    except (IndexError, ValueError):
        return 0, 0, d.name
