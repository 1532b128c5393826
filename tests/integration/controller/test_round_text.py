"""round.json as the controller publishes it (controller.publish): what replicas read back
(rendezvous.read_round) is the full round, round after round of shrinks, grows and moves,
with names JSON must escape among them or not, and no temporary file is left beside it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from perdure.controller.publish import members_text, publish_round
from perdure.core.events import Rendezvous
from perdure.runtime.elastic.rendezvous import Member, read_round

PLAIN = [f"w-{i}" for i in range(60)]
NAMES = [*PLAIN, 'odd "quoted"\\name', "nœud-ü", "tab\there"]


def plain(d: Rendezvous) -> dict[str, object]:
    """The round as a dict per member."""
    return {"job_id": d.job_id, "attempt": d.attempt, "round": d.round, "reason": d.reason,
            "time": d.time, "world_size": len(d.members),
            "members": [{"replica": n, "rank": i, "node": node}
                        for i, (n, node) in enumerate(d.members)]}


@pytest.mark.parametrize("seed", range(8))
def test_rounds_read_back_whole(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    names = PLAIN if seed % 2 else NAMES
    where = {n: rng.choice(["a", "b", "c", 'n"1'] if seed % 4 < 2 else ["a", "b"])
             for n in names}
    for number in range(12):
        for n in rng.sample(names, rng.randint(0, 4)):  # some move
            where[n] = rng.choice(["a", "b", "c", "d"])
        members = rng.sample(names, rng.randint(0 if number else 1, len(names)))
        d = Rendezvous("job-1", 2, number, tuple((n, where[n]) for n in members),
                       f"round {number}", 1000.5 + number)
        publish_round(tmp_path, d)
        path = tmp_path / "rdzv" / "job-1" / "round.json"
        assert json.loads(path.read_text()) == plain(d)
        rnd = read_round(path.parent)
        assert rnd is not None and (rnd.round, rnd.attempt, rnd.reason) == (number, 2, d.reason)
        assert rnd.members == tuple(Member(n, i, where[n]) for i, n in enumerate(members))
        assert [p.name for p in path.parent.iterdir()] == ["round.json"]  # no temp file left


def test_members_text_is_what_json_dumps_writes() -> None:
    members = tuple((n, n[::-1]) for n in NAMES)
    d = Rendezvous("job-1", 1, 0, members, "r", 1.0)
    expected = json.dumps([{"replica": n, "node": node, "rank": i}
                           for i, (n, node) in enumerate(members)])
    assert f"[{members_text(d)}]" == expected
