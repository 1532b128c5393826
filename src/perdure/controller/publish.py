"""What the controller hands its replicas outside the backend: an elastic job's round file.

Side effects: writes `<state>/rdzv/<job>/round.json` atomically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from perdure import statedir
from perdure.core.events import Rendezvous


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
