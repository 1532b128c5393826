"""Snapshots in this process: the peer holder's protocol over real sockets, saving into host
memory, replicating to a peer, node-local files, and restoring from each."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.helpers.holders import fetch_bytes
from torch import nn
from transport_pair import JOB, net_env, start_relay

from perdure.runtime.elastic import Snapshotter
from perdure.runtime.elastic import holder as hd

SECRET = "0f" * 32


@pytest.fixture(autouse=True)
def job_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_JOB_SECRET", SECRET)  # what perdure gives every replica


@pytest.fixture
def holder() -> Any:
    h = hd.Holder(keep=2, secret=SECRET, allowed=lambda name: True)
    yield h
    h.close()


def address(h: hd.Holder, replica: str = "worker-1") -> hd.HolderAddress:
    return hd.HolderAddress(replica, "127.0.0.1", h.port)


def test_holder_keeps_the_newest_snapshots_per_replica(holder: hd.Holder) -> None:
    at = address(holder)
    for step in (10, 20, 30):
        hd.put(at, "worker-0", step, [b"payload-", str(step).encode()], secret=SECRET)
    hd.put(at, "worker-3", 5, [b"other"], secret=SECRET)
    assert hd.list_steps(at, "worker-0", secret=SECRET) == [20, 30]
    assert bytes(fetch_bytes(at, "worker-0", 30, secret=SECRET)) == b"payload-30"
    with pytest.raises(ConnectionError, match="no step 10"):
        fetch_bytes(at, "worker-0", 10, secret=SECRET)
    assert holder.nbytes == len(b"payload-20") + len(b"payload-30") + len(b"other")


def test_a_transfer_cut_short_is_never_stored(holder: hd.Holder) -> None:
    with socket.create_connection(("127.0.0.1", holder.port)) as sock:
        header = json.dumps({"op": "put", "replica": "worker-0", "step": 40, "size": 1000,
                             "meta": {}}).encode()
        sock.sendall(struct.pack(">I", len(header)) + header + b"x" * 10)
    # the sender died after 10 of 1000 bytes
    assert hd.list_steps(address(holder), "worker-0", secret=SECRET) == []


def test_an_unreachable_holder_lists_nothing() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    assert hd.list_steps(hd.HolderAddress("gone", "127.0.0.1", port), "worker-0",
                         secret=SECRET) == []


def make_state(extra: int = 0) -> dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    state: dict[str, Any] = {"model": model, "optim": torch.optim.Adam(model.parameters()),
                             "step": 0, "data": {"epoch": 0, "cursor": 0}}
    if extra:
        state["extra"] = torch.zeros(extra)
    return state


def train(state: dict[str, Any], steps: int) -> None:
    for _ in range(steps):
        state["model"](torch.randn(4, 8)).sum().backward()
        state["optim"].step()
        state["step"] += 1
        state["data"] = {"epoch": 0, "cursor": state["step"] * 4}


def test_save_then_load_from_own_memory(tmp_path: Path) -> None:
    snap = Snapshotter(replicate=False)
    state = make_state()
    train(state, 3)
    assert snap.save(3, state)
    snap.join()
    latest = snap.latest
    assert latest is not None and latest.step == 3 and latest.peer is None
    weights = state["model"].weight.detach().clone()
    train(state, 2)
    info = snap.load(state)
    assert info is not None and (info.step, info.source) == (3, "memory")
    assert torch.equal(state["model"].weight, weights) and state["step"] == 3
    assert state["data"] == {"epoch": 0, "cursor": 12}
    snap.close()


def test_one_thread_sends_every_save(tmp_path: Path) -> None:
    # A thread started per save held training ~2 ms of a 0.2 ms snapshot on a busy machine.
    senders: list[threading.Thread] = []

    class Watched(Snapshotter):
        def _replicate(self, tree: dict[str, Any], info: Any) -> None:
            senders.append(threading.current_thread())
            super()._replicate(tree, info)

    snap = Watched(replicate=False, holder_dir=tmp_path)
    state = make_state()
    for step in range(1, 6):
        train(state, 1)
        assert snap.save(step, state)
        snap.join()
    assert len(senders) == 5 and len(set(senders)) == 1
    assert snap.latest is not None and snap.latest.step == 5
    snap.close()


def test_a_save_while_one_is_in_flight_is_skipped(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # the peer accepts the connection but never reads: the 32 MB send stays in flight
    stalled = socket.create_server(("127.0.0.1", 0))
    (tmp_path / "holders").mkdir()
    (tmp_path / "holders" / "worker-1.json").write_text(json.dumps(
        {"replica": "worker-1", "host": "127.0.0.1", "port": stalled.getsockname()[1]}))
    monkeypatch.setenv("PERDURE_RDZV_DIR", str(tmp_path))
    monkeypatch.setenv("PERDURE_REPLICA", "worker-0")
    snap = Snapshotter()
    state = make_state(extra=8 << 20)
    assert snap.save(1, state)
    time.sleep(0.2)
    assert snap.in_flight
    assert not snap.save(2, state) and snap.skipped == 1
    stalled.close()  # the peer goes away: the snapshot stays local, the save does not fail
    snap.join()
    latest = snap.latest
    assert latest is not None and latest.step == 1 and latest.peer is None
    assert snap.save(3, state)
    snap.close()


def test_files_outlive_the_process_and_keep_the_newest(tmp_path: Path) -> None:
    first = Snapshotter(replicate=False, holder_dir=tmp_path)
    state = make_state()
    for step in (1, 2, 3):
        train(state, 1)
        first.save(step, state)
        first.join()
    assert first.holder_dir is not None and first.holder_dir.is_relative_to(tmp_path)
    files = sorted(p.name for p in first.holder_dir.iterdir())
    assert files == ["snap-000000000002.bin", "snap-000000000003.bin"]
    # weights, maybe in a /dev/shm every local user can list: the user's only
    assert all(p.stat().st_mode & 0o077 == 0 for p in first.holder_dir.iterdir())
    assert first.holder_dir.stat().st_mode & 0o077 == 0
    assert first.holder_dir.parent.stat().st_mode & 0o077 == 0
    weights = state["model"].weight.detach().clone()
    first.close()

    again = Snapshotter(replicate=False, holder_dir=tmp_path)  # a new process on this node
    fresh = make_state()
    info = again.load(fresh)
    assert info is not None and (info.step, info.source) == (3, "file")
    assert torch.equal(fresh["model"].weight, weights)
    again.close()


@pytest.mark.parametrize("transport", ["file", "net"])
def test_a_replacement_restores_from_its_peers_memory(tmp_path: Path, transport: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Holders are found through the job's transport: files, or the controller's relay."""
    relay = start_relay(tmp_path) if transport == "net" else None

    def become(replica: str) -> None:
        if relay is None:
            monkeypatch.setenv("PERDURE_RDZV_DIR", str(tmp_path))
            monkeypatch.setenv("PERDURE_REPLICA", replica)
            return
        for key, value in net_env(relay.address, replica).items():
            monkeypatch.setenv(key, value)

    try:
        become("worker-1")
        peer = Snapshotter()
        become("worker-0")
        mine = Snapshotter()
        state = make_state()
        train(state, 5)
        mine.save(5, state)
        mine.join()
        assert mine.latest is not None and mine.latest.peer == "worker-1"
        weights = state["model"].weight.detach().clone()
        mine.close()  # worker-0 dies: its memory is gone

        replacement = Snapshotter()  # worker-0 again, a new process: nothing of its own
        fresh = make_state()
        info = replacement.load(fresh)
        assert info is not None and (info.step, info.source) == (5, "peer:worker-1")
        assert torch.equal(fresh["model"].weight, weights) and fresh["step"] == 5
        replacement.close()
        peer.close()
    finally:
        if relay is not None:
            relay.close()
    if relay is not None:  # registered by the relay, in the layout the file transport uses
        assert (tmp_path / "rdzv" / JOB / "holders" / "worker-1.json").exists()


def test_a_failed_background_save_is_raised_once(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    snap = Snapshotter(replicate=False, holder_dir=blocker)  # files cannot go there
    state = make_state()
    snap.save(1, state)
    with pytest.raises(OSError):
        snap.join()
    snap.join()  # raised once, then gone
    assert snap.latest is None
    snap.close()
