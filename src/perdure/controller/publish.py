"""What the controller hands its replicas outside the backend: an elastic job's round file."""

from __future__ import annotations

import json
import os
from json.encoder import encode_basestring_ascii as quoted
from pathlib import Path

from perdure import statedir
from perdure.core.events import Rendezvous


def publish_round(state_dir: Path, d: Rendezvous) -> None:
    """Write an elastic job's round to `<state>/rdzv/<job>/round.json`, atomically."""
    directory = statedir.rendezvous_dir(state_dir, d.job_id)
    os.makedirs(directory, exist_ok=True)
    head = json.dumps({"job_id": d.job_id, "attempt": d.attempt, "round": d.round,
                       "reason": d.reason, "time": d.time, "world_size": len(d.members)})
    statedir.write_atomically(os.path.join(directory, statedir.ROUND),
                              f'{head[:-1]}, "members": [{members_text(d)}]}}')


def members_text(d: Rendezvous) -> str:
    """The members as json.dumps writes a list of {"replica", "node", "rank"}, 3 times
    faster (it took most of a 16,384-replica elastic tick)."""
    return ", ".join(f'{{"replica": {quoted(name)}, "node": {quoted(node)}, "rank": {rank}}}'
                     for rank, (name, node) in enumerate(d.members))
