"""Membership rounds from the controller: reading round.json, and replicas' ready markers.

The controller writes `$PERDURE_RDZV_DIR/round.json` atomically on every membership change
(`publish_round` in perdure.controller.loop): the round number, why, and the members in rank
order with their nodes. Rounds only go up within an attempt. A replica that starts after the
round that includes it was published (a replacement) writes a ready marker, so the members
grow the group only once it is really there (barrier.py forms the groups).

Side effects: reads round.json, reads and writes ready markers.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ROUND_FILE",
    "Member",
    "Round",
    "RoundWatcher",
    "finished",
    "mark_finished",
    "mark_ready",
    "read_round",
    "ready_round",
]

ROUND_FILE = "round.json"
_BARRIER_POLL = 0.01  # seconds between store checks while members gather (local file reads)


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
    # (resize mode, after a loss: the survivors go on without a replacement that is still
    # starting); the generation of the full round's store in which that was decided.
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
    def from_json(cls, doc: Any, where: str = ROUND_FILE) -> Round:
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


def read_round(rdzv_dir: Path) -> Round | None:
    """The round published in `rdzv_dir`, or None when none has been published yet."""
    path = rdzv_dir / ROUND_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); it is written by perdure") from None
    return Round.from_json(doc, str(path))


class RoundWatcher:
    """The latest round, re-read only when round.json changed (one stat() per call)."""

    def __init__(self, rdzv_dir: Path) -> None:
        self.rdzv_dir = rdzv_dir
        self._path = rdzv_dir / ROUND_FILE
        self._stamp: tuple[int, int, int] | None = None
        self._round: Round | None = None

    def latest(self) -> Round | None:
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            return self._round
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)  # os.replace gives a new inode
        if stamp != self._stamp:
            rnd = read_round(self.rdzv_dir)
            self._stamp = stamp
            # rounds only go up within an attempt; never step back to an older read
            if rnd is not None and (self._round is None or _newer(rnd, self._round)):
                self._round = rnd
        return self._round


def _newer(a: Round, b: Round) -> bool:
    return (a.attempt, a.round) > (b.attempt, b.round)


# ---- the end of training: a replica still joining has nothing left to do ------------------


def _finished_path(rdzv_dir: Path, attempt: int) -> Path:
    return rdzv_dir / "finished" / f"{attempt}.json"


def mark_finished(rdzv_dir: Path, attempt: int, replica: str, round_no: int) -> None:
    """Say that the training loop of `attempt` returned (written by every member that ends)."""
    path = _finished_path(rdzv_dir, attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{replica}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"replica": replica, "round": round_no, "time": time.time()}))
    os.replace(tmp, path)


def finished(rdzv_dir: Path, attempt: int) -> bool:
    """Whether the training loop of `attempt` has already returned in some member."""
    return _finished_path(rdzv_dir, attempt).exists()


# ---- ready markers: a replacement says "I am up and waiting to join round N" ---------------


def _ready_path(rdzv_dir: Path, attempt: int, replica: str) -> Path:
    return rdzv_dir / "ready" / f"{attempt}-{replica}.json"


def mark_ready(rdzv_dir: Path, attempt: int, replica: str, round_no: int) -> None:
    """Tell the members of `round_no` that this (new) replica is up and joining it."""
    path = _ready_path(rdzv_dir, attempt, replica)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"round": round_no, "pid": os.getpid(), "time": time.time()}))
    os.replace(tmp, path)


def ready_round(rdzv_dir: Path, attempt: int, replica: str) -> int | None:
    """The newest round `replica` said it is joining, or None."""
    try:
        return int(json.loads(_ready_path(rdzv_dir, attempt, replica).read_text())["round"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
