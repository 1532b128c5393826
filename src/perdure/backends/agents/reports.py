"""What a node agent's report says of one launch, applied to the controller's copy of it
(the files the local backend would have written) and observed.

Side effects: writes the launch's mirror (logs, records) in the state dir.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

from perdure import statedir
from perdure.backends.agents.alloc import Alloc
from perdure.backends.base import exit_observation, sent_error
from perdure.backends.local.progress import ProgressReader
from perdure.backends.node.mirror import Mirror
from perdure.core.events import Launch, Observation, ReplicaStarted


@dataclass
class Tracked:

    launch: Launch
    alloc: Alloc
    mirror: Mirror
    dispatched: bool = False
    started: bool = False


def in_step(tracked: Tracked, item: dict[str, Any]) -> bool:
    """Whether the item's bytes start where the copy ends (else it predates a resync)."""
    offsets = item.get("offsets")
    if not isinstance(offsets, dict):
        return True
    return all(tracked.mirror.offsets.get(k, 0) == v for k, v in offsets.items())


def apply(tracked: Tracked, item: dict[str, Any], out: list[Observation],
          progress: ProgressReader) -> bool:
    """Copy the item into the launch's mirror and observe it; whether the launch ended."""
    lid = tracked.launch.launch_id
    chunks = item.get("chunks")
    if isinstance(chunks, dict):
        tracked.mirror.append({k: base64.b64decode(v) for k, v in chunks.items()})
    status = item.get("status")
    if isinstance(status, dict) and not tracked.started:
        tracked.started = True
        tracked.mirror.write_record(statedir.STATUS, status)
        out.append(ReplicaStarted(lid, int(status["pid"]), float(status["started_at"])))
    record = item.get("exit")
    # read whenever an item came (the agent paces them), so no throttle: final=True
    if tracked.started and (p := progress.read(lid, tracked.mirror.dir, time.monotonic(),
                                                final=True)):
        out.append(p)  # what it reported last comes before its exit
    if not isinstance(record, dict):
        return False
    progress.forget(lid)
    tracked.mirror.write_record(statedir.EXIT, record)
    out.append(exit_observation(lid, record, sent_error(tracked.mirror.dir, record)))
    return True

