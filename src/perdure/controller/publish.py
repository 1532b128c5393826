"""What the controller hands its replicas outside the backend: free ports for a new group's
rendezvous, and an elastic job's round file.

Side effects: binds and closes sockets; writes `<state>/rdzv/<job>/round.json` atomically.
"""

from __future__ import annotations

import itertools
import json
import operator
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import cast

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


class RoundEntries:
    """Each member's entry in its job's round file, encoded once and kept while the job runs.

    A round of 16,384 members encoded from scratch (a dict per member, then json.dumps) took
    20-37 ms of a tick (bench/controller.py --only big); a later round mostly has the same
    members on the same nodes, and only their ranks move, so each (replica, node) keeps the
    text up to its rank, and a round is a join of those with the ranks' texts.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, dict[tuple[str, str], str]] = {}
        self._ranks: list[str] = []  # rank i's text: "i}, "

    def members(self, d: Rendezvous) -> str:
        """The JSON array of `d`'s members, each {"replica", "node", "rank"}."""
        entries = self._jobs.setdefault(d.job_id, {})
        if len(entries) > 2 * len(d.members) + 64:  # members moved a lot: drop the old ones
            entries = self._jobs[d.job_id] = {m: entries[m] for m in d.members if m in entries}
        found = list(map(entries.get, d.members))  # (a pair's hash is not kept: one pass)
        if None in found:  # new members, or moved: made in C
            new = list(itertools.compress(d.members, map(operator.not_, found)))
            if _plain("".join(itertools.chain.from_iterable(new))):
                texts = map(_PLAIN_HEAD.__mod__, new)  # JSON strings as they are
            else:
                names, nodes = map(_string, map(_FIRST, new)), map(_string, map(_SECOND, new))
                texts = map(_HEAD.__mod__, zip(names, nodes, strict=True))
            entries.update(zip(new, texts, strict=True))
            found = list(map(entries.__getitem__, d.members))
        n, ranks = len(d.members), self._ranks
        if len(ranks) < n:  # made once: "%d}, " in C
            ranks.extend(map("%d}, ".__mod__, range(len(ranks), n)))
        parts = ["["] * (2 * n + 1)  # one join, no string made per member
        parts[1::2], parts[2::2] = cast(list[str], found), ranks[:n]  # no None left
        return "".join(parts).removesuffix(", ") + "]"

    def forget(self, job_id: str) -> None:
        """The job ended: its entries go."""
        self._jobs.pop(job_id, None)


def _plain(text: str) -> bool:
    """Whether `text` is a JSON string's content as it is: printable ASCII, no quote or
    backslash (string methods in C: a regex took ~7 ms over a round's 16,384 names)."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def publish_round(state_dir: Path, d: Rendezvous, entries: RoundEntries | None = None) -> None:
    """Write an elastic job's round for its replicas: `<state>/rdzv/<job>/round.json`,
    through a temporary file and a rename (a reader sees the old round or the new one);
    `entries`: the members' texts kept from earlier rounds."""
    directory = state_dir / "rdzv" / d.job_id
    directory.mkdir(parents=True, exist_ok=True)
    head = json.dumps({
        "job_id": d.job_id, "attempt": d.attempt, "round": d.round, "reason": d.reason,
        "time": d.time, "world_size": len(d.members),
    })
    members = (entries or RoundEntries()).members(d)
    tmp = directory / f".round.{os.getpid()}.tmp"
    tmp.write_text(f'{head[:-1]}, "members": {members}}}')
    os.replace(tmp, directory / "round.json")


_HEAD = '{"replica": %s, "node": %s, "rank": '
# Names of printable ASCII without quotes or backslashes are JSON strings once quoted (a
# round's 16,384 new entries in ~3 ms instead of ~6: no encoder call per name).
_PLAIN_HEAD = '{"replica": "%s", "node": "%s", "rank": '
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_string = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
