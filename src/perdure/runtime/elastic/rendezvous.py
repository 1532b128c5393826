"""Membership rounds as the controller publishes them (round.json, read through the transport).

Side effects: `read_round` and `RoundWatcher` read through the transport given.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from perdure import statedir
from perdure.runtime import transport
from perdure.runtime.transport import Where

__all__ = ["Member", "Round", "RoundWatcher", "read_round"]


@dataclass(frozen=True)
class Member:
    """One replica of a round: its name, its rank in the round, and its node ("slice")."""

    replica: str
    rank: int
    node: str


@dataclass(frozen=True)
class Round:
    """One membership round as the controller published it (ranks are positions in members)."""

    job_id: str
    attempt: int
    round: int
    reason: str
    time: float
    members: tuple[Member, ...]
    # >= 0: this round without the members that were not there when its group was formed
    # (resize mode, after a loss), decided in this generation of the full round's store
    partial: int = -1

    @property
    def world_size(self) -> int:
        return len(self.members)

    @property
    def replicas(self) -> tuple[str, ...]:
        return tuple(m.replica for m in self.members)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The members' nodes, each once, in rank order."""
        return tuple(dict.fromkeys(m.node for m in self.members))

    def rank_of(self, replica: str) -> int | None:
        return next((m.rank for m in self.members if m.replica == replica), None)

    @property
    def is_partial(self) -> bool:
        return self.partial >= 0

    @property
    def store_name(self) -> str:
        """This round's FileStore (a file of its own: a store is never reused)."""
        suffix = f"-partial{self.partial}" if self.is_partial else ""
        return f"store-{self.attempt}-{self.round}{suffix}"

    def describe(self) -> str:
        part = ", without the members not up yet" if self.is_partial else ""
        return f"round {self.round} (world size {self.world_size}{part}: {self.reason})"

    def only(self, replicas: tuple[str, ...], generation: int) -> Round:
        """This round with only `replicas`, re-ranked in the same order (a partial round)."""
        kept = [m for m in self.members if m.replica in replicas]
        members = tuple(Member(m.replica, i, m.node) for i, m in enumerate(kept))
        return Round(self.job_id, self.attempt, self.round, self.reason, self.time, members,
                     partial=generation)

    @classmethod
    def from_json(cls, doc: Any, where: str = statedir.ROUND) -> Round:
        """Parse what the controller wrote; a bad document raises ValueError naming the field."""
        try:
            members = tuple(
                Member(str(m["replica"]), int(m["rank"]), str(m.get("node") or ""))
                for m in doc["members"]
            )
            rnd = cls(str(doc["job_id"]), int(doc["attempt"]), int(doc["round"]),
                      str(doc.get("reason", "")), float(doc.get("time", 0.0)), members)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"{where} is not a membership round ({type(exc).__name__}: {exc}); it must hold "
                "job_id, attempt, round and members [{replica, rank, node}] as perdure writes it"
            ) from None
        if [m.rank for m in members] != list(range(len(members))):
            raise ValueError(f"{where}: member ranks {[m.rank for m in members]} are not 0..n-1")
        return rnd

    @classmethod
    def static(cls, replica: str, rank: int, world_size: int, node: str) -> Round:
        """The one round of a world without a controller (names of the others are unknown)."""
        members = tuple(
            Member(replica if r == rank else f"rank-{r}", r, node) for r in range(world_size)
        )
        return cls("local", 0, 0, "static world", 0.0, members)


def read_round(where: Where) -> Round | None:
    """The round published in `where` (a rendezvous directory or a transport), or None."""
    return RoundWatcher(where).latest()


class RoundWatcher:
    """The latest round, re-read only when it changed (one stat() per call on files)."""

    def __init__(self, where: Where) -> None:
        self.transport = transport.of(where)
        self._stamp: Hashable | None = None
        self._round: Round | None = None

    def latest(self) -> Round | None:
        stamp, doc = self.transport.round_doc(self._stamp)
        if doc is not None:
            rnd = Round.from_json(doc, f"{statedir.ROUND} in {self.transport.where()}")
            self._stamp = stamp
            # rounds only go up within an attempt; never step back to an older read
            old = self._round
            if old is None or (rnd.attempt, rnd.round) > (old.attempt, old.round):
                self._round = rnd
        return self._round
