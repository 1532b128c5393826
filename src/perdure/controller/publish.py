"""What the controller hands its replicas outside the backend: free ports for a new group's
rendezvous, and an elastic job's round file.

Side effects: binds and closes sockets; writes `<state>/rdzv/<job>/round.json` atomically.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from perdure import statedir
from perdure.core.events import Rendezvous


def free_ports() -> Iterator[int]:
    """Ports the OS says are free now, never the same one twice in a row."""
    recent: list[int] = []
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port in recent:
            continue
        recent = [*recent[-63:], port]
        yield port


def publish_round(state_dir: Path, d: Rendezvous) -> None:
    """Write an elastic job's round for its replicas: `<state>/rdzv/<job>/round.json`,
    atomically (a reader sees the old round or the new one)."""
    directory = statedir.rendezvous_dir(state_dir, d.job_id)
    os.makedirs(directory, exist_ok=True)
    members = [{"replica": name, "node": node, "rank": rank}
               for rank, (name, node) in enumerate(d.members)]
    statedir.write_atomically(os.path.join(directory, statedir.ROUND), json.dumps({
        "job_id": d.job_id, "attempt": d.attempt, "round": d.round, "reason": d.reason,
        "time": d.time, "world_size": len(d.members), "members": members,
    }))
