"""How the Slurm backend restores a node it lost: once Slurm has shown it down and usable
again (or RESTORE_SECONDS after it was lost, when Slurm never showed it down).

`NodeRestore` is a half of `SlurmBackend` (which holds the state). Side effects: sinfo (through
slurmcmd).
"""

from __future__ import annotations

import time

from perdure.backends.slurm import slurmcmd
from perdure.core.clusterspec import SlurmSpec
from perdure.core.events import Command, Observation

RESTORE_SECONDS = 60.0  # a lost node Slurm never showed down is restored after this


class NodeRestore:
    """See the module docstring."""

    spec: SlurmSpec
    _down: dict[str, float]
    _seen_down: set[str]

    def _restore(self, now: float, out: list[Observation]) -> None:
        """A lost node is back once Slurm has shown it down and usable again."""
        try:
            found = {n.name: n for n in slurmcmd.nodes(self.spec.partition)}
        except slurmcmd.SlurmError:
            return
        for node, since in list(self._down.items()):
            info = found.get(node)
            if info is None:
                continue
            if not info.usable:
                self._seen_down.add(node)
            elif node in self._seen_down or now - since > RESTORE_SECONDS:
                del self._down[node]
                out.append(Command("node-back", node, time.time()))
