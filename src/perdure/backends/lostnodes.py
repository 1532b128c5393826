"""What the cluster backends do alike with a lost node: it fails once (`fail-node`, before
its replicas' exits, so none is charged), its launches end killed, and it is back (`node-back`)
when its platform shows it again. Side effects: the killed launches' exit records.
"""

from __future__ import annotations

import signal
import time

from perdure import statedir
from perdure.backends.base import exit_observation
from perdure.backends.node.mirror import Mirror
from perdure.core.events import Command, Observation


class LostNodes:
    """The lost nodes, each with when it was lost and what it had (its Ray node's id)."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[float, str]] = {}

    def __contains__(self, node: object) -> bool:
        return node in self.nodes

    def lose(self, node: str, out: list[Observation], had: str = "", kind: str = "fail-node",
             why: str = "") -> bool:
        """Say `node` is lost (`kind`: or drained, preempted); False when it was already."""
        if node in self.nodes:
            return False
        self.nodes[node] = (time.monotonic(), had)
        out.append(Command(kind, node, time.time(), why=why))
        return True

    def back(self, node: str, out: list[Observation]) -> None:
        del self.nodes[node]
        out.append(Command("node-back", node, time.time()))


def killed(launch_id: str, mirror: Mirror, why: str, oom: bool = False) -> Observation:
    """The exit of a launch lost with its node (or its actor), recorded in its mirror."""
    record = {"exit_code": 128 + signal.SIGKILL, "signal": int(signal.SIGKILL), "oom": oom,
              "time": time.time(), "lost": why}
    mirror.write_record(statedir.EXIT, record)
    return exit_observation(launch_id, record, None)
