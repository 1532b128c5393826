"""The controller's copy of what a launch on a remote node wrote: logs, progress, its records.

Kept where the local backend keeps them, so `perdure logs`, `describe` and goodput read a
cluster job exactly as a local one; `mirror.json` records how far each stream was copied.
"""

from __future__ import annotations

import os
from typing import Any

from perdure import statedir
from perdure.backends.node import logcap
from perdure.backends.node.pulls import RESTARTED


class Mirror:
    """The copy of one launch's streams in the controller's state dir."""

    def __init__(self, state_dir: str, launch_id: str, log_prefix: str) -> None:
        self.dir = statedir.launch_dir(state_dir, launch_id)
        os.makedirs(self.dir, exist_ok=True)
        self.paths = {"out": log_prefix + ".out", "err": log_prefix + ".err",
                      "log": log_prefix + ".log",
                      "progress": os.path.join(self.dir, statedir.PROGRESS)}
        self.offsets: dict[str, int] = {k: 0 for k in self.paths}
        self.log_max_bytes = logcap.max_bytes()
        saved = statedir.read_json(os.path.join(self.dir, statedir.MIRROR))
        if saved:
            self.offsets.update({k: int(v) for k, v in saved.items() if k in self.paths})

    def write_record(self, name: str, record: dict[str, Any]) -> None:
        statedir.write_json(os.path.join(self.dir, name), record)

    def read_record(self, name: str) -> dict[str, Any] | None:
        return statedir.read_json(os.path.join(self.dir, name))

    def append(self, chunks: dict[str, bytes]) -> bool:
        """Append what a pull brought; whether there was anything."""
        grew = False
        for stream in chunks.get(RESTARTED, b"").decode().split(","):
            if stream in self.offsets:  # the node trimmed it: its bytes count from 0 again
                self.offsets[stream] = 0
        for stream, data in chunks.items():
            if not data or stream not in self.paths:
                continue
            path = self.paths[stream]
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "ab") as f:
                f.write(data)
            if stream != "progress":  # the copy keeps under the same cap as the original
                logcap.trim(path, self.log_max_bytes)
            self.offsets[stream] += len(data)
            grew = True
        if grew:
            statedir.write_json(os.path.join(self.dir, statedir.MIRROR), dict(self.offsets))
        return grew
