"""Slurm's warnings that a node is about to be taken (a drain, a maintenance reservation
near): a busy node so warned is drained in perdure (`drain-node`), back once Slurm lets go.

Side effects: sinfo and scontrol, at most every WATCH_SECONDS.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Set

from perdure.backends.slurm import slurmcmd
from perdure.core.events import Command, Observation

WATCH_SECONDS = 2.0
# A maintenance reservation this close (or begun) takes its nodes: their replicas move now.
MAINTENANCE_LEAD_SECONDS = 900.0


def _starts(reservation: slurmcmd.Reservation) -> float | None:
    try:  # Slurm prints its local time without a zone
        return datetime.datetime.fromisoformat(reservation.start).timestamp()
    except ValueError:
        return None


class PlatformWatch:

    def __init__(self, partition: str | None) -> None:
        self.partition = partition
        self.warned: dict[str, str] = {}  # node -> the reason it was drained for
        self._next = 0.0

    def warnings(self, now: float) -> dict[str, str]:
        """Node -> Slurm's reason, for every node Slurm drains or will soon maintain."""
        found = {n: f"Slurm drains it: {why}" if why else "Slurm drains it"
                 for n, why in slurmcmd.drains(self.partition).items()}
        for r in slurmcmd.reservations():
            starts = _starts(r)
            if r.maint and starts is not None and starts - now <= MAINTENANCE_LEAD_SECONDS:
                for node in slurmcmd.expand(r.nodes):
                    found.setdefault(node, f"Slurm maintenance reservation {r.name} starts "
                                           f"at {r.start}")
        return found

    def step(self, busy: Set[str], fenced: Set[str], out: list[Observation]) -> None:
        """Drain the busy nodes Slurm warns of (not those perdure fenced); a node Slurm no
        longer warns of is back."""
        now = time.monotonic()
        if now < self._next or not (busy or self.warned):
            return
        self._next = now + WATCH_SECONDS
        try:
            found = self.warnings(time.time())
        except slurmcmd.SlurmError:
            return  # slurmctld busy or down: the next look
        for node in sorted((set(busy) & set(found)) - set(fenced) - set(self.warned)):
            self.warned[node] = found[node]
            out.append(Command("drain-node", node, time.time(), why=found[node]))
        for node in [n for n in self.warned if n not in found]:
            del self.warned[node]
            out.append(Command("node-back", node, time.time()))
