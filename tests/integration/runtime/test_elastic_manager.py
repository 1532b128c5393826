"""elastic_retry in this process, on a real gloo group of one: what is retried, what is not,
planned changes at a step boundary, waiting for the minimum, and the static fallback; over
files and over the controller's relay (whose store the group is formed in)."""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist
from transport_pair import JOB, transport_of

from perdure.runtime.elastic import (
    ElasticConfigWarning,
    ElasticEvent,
    Manager,
    MembershipError,
    RetryLimit,
)
from perdure.runtime.transport import FileTransport

LOST = "[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer."


def publish(rdzv: Path, round_no: int, members: list[str], reason: str = "admitted") -> None:
    body = {"job_id": "j", "attempt": 1, "round": round_no, "reason": reason, "time": 0.0,
            "world_size": len(members),
            "members": [{"replica": r, "rank": i, "node": "a"} for i, r in enumerate(members)]}
    tmp = rdzv / ".round.tmp"
    tmp.write_text(json.dumps(body))
    os.replace(tmp, rdzv / "round.json")


@pytest.fixture
def rdzv(tmp_path: Path) -> Path:
    """The job's rendezvous directory in the controller's state dir (tmp_path)."""
    path = tmp_path / "rdzv" / JOB
    path.mkdir(parents=True)
    return path


@pytest.fixture(params=["file", "net"])
def manager(request: pytest.FixtureRequest, tmp_path: Path, rdzv: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Manager]:
    """worker-0's Manager, reaching the rendezvous through files or the controller's relay."""
    monkeypatch.setenv("PERDURE_ATTEMPT", "1")
    for name in ("PERDURE_ELASTIC_MODE", "PERDURE_MIN_WORLD_SIZE", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    publish(rdzv, 0, ["worker-0"])
    with transport_of(request.param, tmp_path) as t:
        m = Manager(transport=t, replica="worker-0")
        yield m
        m.close()
    assert not dist.is_initialized()


def test_a_bug_propagates_at_once(manager: Manager) -> None:
    calls = []

    @manager.elastic_retry(minimum_replicas=1, poll_interval=0.01, timeout=5)
    def train() -> None:
        calls.append(manager.round)
        raise ValueError("bad shape")

    with pytest.raises(ValueError, match="bad shape"):
        train()
    assert calls == [0]


def test_a_lost_peer_rebuilds_the_group_and_reenters(manager: Manager, rdzv: Path) -> None:
    events: list[ElasticEvent] = []
    rebuilt: list[bool] = []

    @manager.elastic_retry(minimum_replicas=1, poll_interval=0.01, timeout=5,
                           on_elastic_event=events.append,
                           pre_callback=lambda: rebuilt.append(dist.is_initialized()))
    def train() -> int:
        assert dist.is_initialized() and dist.get_world_size() == 1
        if not events:
            raise RuntimeError(LOST)
        return 42

    assert train() == 42
    assert rebuilt == [True]
    [event] = events
    assert (event.kind, event.round, event.world_size, event.retry) == ("lost", 0, 1, 1)
    assert "Connection reset by peer" in (event.error or "")
    # nobody else left and no newer round came: the same round was formed again
    store = "store-1-0" if manager.transport.kind == "file" else "kv/store-1-0.jsonl"
    assert (rdzv / store).exists()


def test_the_retry_limit_ends_in_a_membership_error(manager: Manager) -> None:
    calls = []

    @manager.elastic_retry(minimum_replicas=1, poll_interval=0.01, timeout=5,
                           retry_policy=RetryLimit(max_attempts=2))
    def train() -> None:
        calls.append(1)
        raise RuntimeError(LOST)

    with pytest.raises(MembershipError, match="after 2 retries") as err:
        train()
    assert len(calls) == 3 and isinstance(err.value.__cause__, RuntimeError)


def test_a_newer_round_is_taken_at_a_step_boundary(manager: Manager, rdzv: Path) -> None:
    events: list[ElasticEvent] = []
    seen: list[tuple[int, bool]] = []

    @manager.elastic_retry(minimum_replicas=1, poll_interval=0.01, timeout=5,
                           on_elastic_event=events.append)
    def train() -> None:
        seen.append((manager.round, manager.should_reconfigure()))
        if manager.round == 0:
            publish(rdzv, 1, ["worker-0"], "grow 1 -> 1: test")
            manager.maybe_reconfigure()
            raise AssertionError("maybe_reconfigure did not raise")

    train()
    assert seen == [(0, False), (1, False)]
    [event] = events
    assert (event.kind, event.previous_round, event.round, event.retry) == ("changed", 0, 1, 0)


def test_waiting_for_the_minimum_ends_in_a_timeout_error(manager: Manager) -> None:
    @manager.elastic_retry(minimum_replicas=2, poll_interval=0.01, timeout=0.5)
    def train() -> None:
        raise AssertionError("must not run with fewer than 2 replicas")

    began = time.monotonic()
    with pytest.raises(TimeoutError, match="at least 2 replicas including worker-0") as err:
        train()
    assert 0.5 <= time.monotonic() - began < 5
    assert "round 0 (world size 1: admitted)" in str(err.value)


def test_a_replica_still_joining_when_the_others_finish_exits_0(manager: Manager,
                                                                rdzv: Path) -> None:
    @manager.elastic_retry(minimum_replicas=2, poll_interval=0.01, timeout=30)
    def train() -> None:
        raise AssertionError("there is no group of 2 to join")

    threading.Timer(0.3, FileTransport(rdzv_dir=rdzv).mark_finished,
                    args=(1, "worker-1", 0)).start()
    began = time.monotonic()
    with pytest.raises(SystemExit) as done:
        train()
    assert done.value.code == 0 and time.monotonic() - began < 5


def test_an_argument_that_disagrees_with_the_spec_is_warned_about(
        manager: Manager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_ELASTIC_MODE", "pause")
    monkeypatch.setenv("PERDURE_MIN_WORLD_SIZE", "1")
    with pytest.warns(ElasticConfigWarning, match="job spec says pause"):
        manager.elastic_retry(minimum_replicas=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        manager.elastic_retry()  # following the spec is silent


def test_nodes_fill_up_when_a_replica_on_another_node_is_ready(manager: Manager,
                                                              rdzv: Path) -> None:
    manager.start(timeout=5)
    assert (manager.rank, manager.world_size, manager.active_ranks) == (0, 1, [0])
    assert manager.active_nodes == ["a"] and manager.inactive_nodes == []
    body = json.loads((rdzv / "round.json").read_text())
    body.update(round=1, reason="grow 1 -> 2: worker-1 is up", world_size=2)
    body["members"].append({"replica": "worker-1", "rank": 1, "node": "b"})
    (rdzv / "round.json").write_text(json.dumps(body))
    assert manager.all_nodes == ["a", "b"] and manager.inactive_nodes == ["b"]
    assert manager.available_inactive_nodes == []  # worker-1 is not up yet
    assert not manager.should_reconfigure()
    FileTransport(rdzv_dir=rdzv).mark_ready(1, "worker-1", 1)
    assert manager.available_inactive_nodes == ["b"]
    assert manager.should_reconfigure()


def test_without_a_controller_it_wraps_a_static_world(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PERDURE_RDZV_DIR", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    m = Manager()
    assert not m.elastic

    @m.elastic_retry()
    def train() -> int:
        raise RuntimeError(LOST)

    with pytest.raises(MembershipError, match="without a controller"):
        train()
    assert (m.world_size, m.rank) == (1, 0) and not dist.is_initialized()
    m.close()
