"""Reading the controller's rounds, partial rounds, ready markers, and who holds whose copy."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perdure.runtime.elastic import Round, read_round
from perdure.runtime.elastic.rendezvous import RoundWatcher
from perdure.runtime.peerring import choose_peer
from perdure.runtime.transport import FileTransport


def doc(round_no: int, members: list[tuple[str, str]], attempt: int = 1,
        reason: str = "admitted") -> dict[str, object]:
    # the shape perdure.controller.publish.publish_round writes
    return {"job_id": "j", "attempt": attempt, "round": round_no, "reason": reason,
            "time": 1.0, "world_size": len(members),
            "members": [{"replica": r, "rank": i, "node": n}
                        for i, (r, n) in enumerate(members)]}


def publish(d: Path, body: dict[str, object]) -> None:
    tmp = d / ".round.tmp"
    tmp.write_text(json.dumps(body))
    os.replace(tmp, d / "round.json")


FOUR = [("worker-0", "a"), ("worker-1", "a"), ("worker-2", "b"), ("worker-3", "b")]


def test_a_round_reads_back_as_published(tmp_path: Path) -> None:
    assert read_round(tmp_path) is None
    publish(tmp_path, doc(3, FOUR, reason="grow 3 -> 4: worker-2 is up"))
    rnd = read_round(tmp_path)
    assert rnd is not None
    assert (rnd.round, rnd.attempt, rnd.world_size) == (3, 1, 4)
    assert rnd.rank_of("worker-2") == 2 and rnd.rank_of("worker-9") is None
    assert rnd.nodes == ("a", "b")
    assert rnd.store_name == "store-1-3"
    assert rnd.describe() == "round 3 (world size 4: grow 3 -> 4: worker-2 is up)"


@pytest.mark.parametrize(("body", "says"), [
    ({"round": 1}, "job_id"),
    ({**doc(1, FOUR), "members": [{"replica": "w", "rank": 1, "node": "a"}]}, "not 0..n-1"),
    ({**doc(1, FOUR), "round": "one"}, "ValueError"),
])
def test_a_bad_round_names_the_file_and_the_problem(tmp_path: Path, body: dict[str, object],
                                                    says: str) -> None:
    publish(tmp_path, body)
    with pytest.raises(ValueError, match=says) as err:
        read_round(tmp_path)
    assert "round.json" in str(err.value)


def test_the_watcher_rereads_only_on_change_and_never_goes_back(tmp_path: Path) -> None:
    watcher = RoundWatcher(tmp_path)
    assert watcher.latest() is None
    publish(tmp_path, doc(1, FOUR))
    first = watcher.latest()
    assert first is not None and first.round == 1
    assert watcher.latest() is first  # unchanged file: no re-read
    publish(tmp_path, doc(2, FOUR[:3], reason="shrink 4 -> 3"))
    second = watcher.latest()
    assert second is not None and second.world_size == 3
    publish(tmp_path, doc(1, FOUR))  # a stale write never moves a replica back
    assert watcher.latest() is second
    publish(tmp_path, doc(0, FOUR, attempt=2))  # a new attempt starts at round 0
    newer = watcher.latest()
    assert newer is not None and newer.attempt == 2


def test_a_partial_round_keeps_order_and_uses_its_own_store() -> None:
    full = Round.from_json(doc(5, FOUR))
    part = full.only(("worker-0", "worker-1", "worker-3"), generation=2)
    assert part.is_partial and not full.is_partial
    assert [(m.replica, m.rank) for m in part.members] == [
        ("worker-0", 0), ("worker-1", 1), ("worker-3", 2)]
    assert part.round == 5 and part.store_name == "store-1-5-partial2"
    assert "without the members not up yet" in part.describe()


def test_static_round_has_this_replica_at_its_rank() -> None:
    rnd = Round.static("worker-1", 1, 3, "local")
    assert rnd.world_size == 3 and rnd.rank_of("worker-1") == 1


def test_ready_markers_say_which_round_a_replica_joins(tmp_path: Path) -> None:
    t = FileTransport(rdzv_dir=tmp_path)
    assert t.ready_round(1, "worker-2") is None
    t.mark_ready(1, "worker-2", 4)
    assert t.ready_round(1, "worker-2") == 4
    assert t.ready_round(2, "worker-2") is None  # per attempt
    t.mark_ready(1, "worker-2", 6)
    assert t.ready_round(1, "worker-2") == 6


@pytest.mark.parametrize(("members", "me", "peer"), [
    (FOUR, "worker-0", "worker-2"),  # half the ring away, on another node
    (FOUR, "worker-1", "worker-3"),
    (FOUR, "worker-2", "worker-0"),  # wraps around
    (FOUR, "worker-3", "worker-1"),
    ([(f"worker-{i}", "a" if i in (0, 4) else f"n{i}") for i in range(8)], "worker-0",
     "worker-5"),  # half the ring away is on my node: the first after it on another
    ([(f"worker-{i}", f"n{i // 2}") for i in range(16)], "worker-3", "worker-11"),
    ([("worker-0", "a"), ("worker-1", "a")], "worker-0", "worker-1"),  # one node: next one
    ([("worker-0", "a")], "worker-0", None),  # alone
    (FOUR, "worker-7", None),  # not a member
])
def test_the_peer_is_half_the_ring_away_on_another_node(members: list[tuple[str, str]], me: str,
                                                      peer: str | None) -> None:
    assert choose_peer(members, me) == peer
