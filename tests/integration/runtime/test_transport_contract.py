"""The runtime's contract with the controller, through each transport: the same calls leave the
same records in the controller's state dir, whether a replica writes them itself (file) or the
controller's relay writes them for it (net)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from transport_pair import JOB, launch_id, net_env, start_relay, transport_of

from perdure import statedir
from perdure.controller.publish import publish_round
from perdure.core.events import Rendezvous
from perdure.runtime import goodput
from perdure.runtime.context import is_notice
from perdure.runtime.elastic.rendezvous import RoundWatcher, read_round
from perdure.runtime.errorfile import read_error_file
from perdure.runtime.errors import write_error_file
from perdure.runtime.transport import (
    NetTransport,
    Transport,
    TransportError,
    current,
    from_env,
)

KINDS = ["file", "net"]


@pytest.fixture(params=KINDS)
def t(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Transport]:
    with transport_of(request.param, tmp_path) as transport:
        yield transport


def publish(state: Path, n: int, members: list[str]) -> None:
    publish_round(state, Rendezvous(JOB, 1, n, tuple((m, "a") for m in members), "test",
                                    time.time()))


def test_rounds_as_the_controller_publishes_them(t: Transport, tmp_path: Path) -> None:
    assert read_round(t) is None
    watcher = RoundWatcher(t)
    assert watcher.latest() is None
    publish(tmp_path, 0, ["worker-0", "worker-1"])
    rnd = read_round(t)
    assert rnd is not None and (rnd.round, rnd.replicas) == (0, ("worker-0", "worker-1"))
    assert watcher.latest() == rnd
    stamp, doc = t.round_doc(None)
    assert doc is not None and t.round_doc(stamp) == (stamp, None)  # unchanged: not re-read
    publish(tmp_path, 1, ["worker-0"])
    latest = watcher.latest()
    assert latest is not None and latest.round == 1 and latest.world_size == 1


def test_markers_land_where_the_controller_reads_them(t: Transport, tmp_path: Path) -> None:
    rdzv = tmp_path / "rdzv" / JOB
    assert t.ready_round(1, "worker-0") is None and not t.finished(1)
    t.mark_ready(1, "worker-0", 4)
    assert t.ready_round(1, "worker-0") == 4 and t.ready_round(2, "worker-0") is None
    assert json.loads((rdzv / "ready" / "1-worker-0.json").read_text())["round"] == 4
    t.mark_finished(1, "worker-0", 4)
    assert t.finished(1) and not t.finished(2)
    assert json.loads((rdzv / "finished" / "1.json").read_text())["replica"] == "worker-0"


def test_snapshot_holders_are_registered_and_found(t: Transport, tmp_path: Path) -> None:
    assert t.holders() == []
    t.register_holder({"replica": "worker-0", "host": "10.0.0.7", "port": 4242, "pid": 9})
    assert t.holders() == [{"replica": "worker-0", "host": "10.0.0.7", "port": 4242, "pid": 9}]
    assert (tmp_path / "rdzv" / JOB / "holders" / "worker-0.json").exists()


def test_progress_reports_reach_the_launch_record(t: Transport, tmp_path: Path) -> None:
    r = goodput.Reporter(t)
    for n in (1, 2, 3):
        r.step(n, 0.01)
    r.emit("checkpoint_save", step=3, seconds=0.2)
    assert r.drain(10)
    path = tmp_path / "launches" / launch_id() / "progress.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [x["kind"] for x in records] == ["start", "steps", "checkpoint_save"]
    assert (records[1]["first"], records[1]["last"], records[1]["count"]) == (1, 3, 3)


@pytest.mark.parametrize("kind", KINDS)
def test_the_error_record_reaches_the_supervisors_reader(kind: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with transport_of(kind, tmp_path) as t:
        _use(t, tmp_path, monkeypatch)
        assert write_error_file(ValueError("bad shape")) is not None
    error = read_error_file(tmp_path / "launches" / launch_id() / "error.json")
    assert error is not None and (error["type"], error["message"]) == ("ValueError", "bad shape")
    assert "Traceback" in error["traceback"] or error["traceback"] == "ValueError: bad shape\n"


@pytest.mark.parametrize("kind", KINDS)
def test_the_stop_notice_tells_a_notice_from_a_plain_stop(kind: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    stop = tmp_path / "launches" / launch_id() / "stop.json"
    with transport_of(kind, tmp_path) as t:
        _use(t, tmp_path, monkeypatch)
        assert t.stop_request() is None and is_notice(current())  # nothing written: someone else
        statedir.write_json(stop, {"signal": 15, "deadline": 0, "reason": "r", "notice": None})
        assert not is_notice(current())  # the backend's plain stop (a new round, a cancel)
        statedir.write_json(stop, {"signal": 15, "deadline": 0, "reason": "r",
                                 "notice": "preemption"})
        assert is_notice(current())


def _use(t: Transport, state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `t` this process's transport, through the environment as perdure sets it."""
    if t.kind == "file":
        d = state / "launches" / launch_id()
        monkeypatch.setenv("PERDURE_ERROR_FILE", str(d / "error.json"))
        monkeypatch.setenv("PERDURE_STOP_FILE", str(d / "stop.json"))
        return
    assert isinstance(t, NetTransport)
    for key, value in net_env(f"{t.client.host}:{t.client.port}").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PERDURE_ERROR_FILE", raising=False)  # only the relay can take it


def test_a_replica_rides_out_a_relay_restart(tmp_path: Path) -> None:
    """Reports made while the controller (and its relay) is down arrive once it is back, at
    the same address, in order and once; a round published meanwhile is seen."""
    relay = start_relay(tmp_path)
    address = relay.address
    with transport_of("file", tmp_path):  # the launch dir, as the backend made it
        pass
    t = from_env(net_env(address))
    assert isinstance(t, NetTransport)
    r = goodput.Reporter(t)
    r.emit("restore", step=None, seconds=0.1)
    assert r.drain(10)
    relay.close()  # the controller dies
    for n in range(1, 6):
        r.step(n, 0.01)
    r.emit("checkpoint_save", step=5, seconds=0.1)
    assert not r.drain(0.3)  # nowhere to go yet: kept
    with pytest.raises(TransportError):  # a write that must arrive says so at its deadline
        t.client.call("finished", {"attempt": 1, "round": 0},
                      deadline=time.monotonic() + 0.3)
    publish(tmp_path, 0, ["worker-0"])
    relay = start_relay(tmp_path)  # a new controller: the port recorded in relay.json
    try:
        assert relay.address == address
        assert r.drain(15)
        rnd = read_round(t)
        assert rnd is not None and rnd.replicas == ("worker-0",)
    finally:
        relay.close()
    path = tmp_path / "launches" / launch_id() / "progress.jsonl"
    kinds = [json.loads(line)["kind"] for line in path.read_text().splitlines()]
    assert kinds == ["start", "restore", "steps", "checkpoint_save"]


STOP_SCRIPT = """
import sys, time
import perdure
ctx = perdure.init(distributed=False)
print("ready", flush=True)
deadline = time.time() + 30
while time.time() < deadline:
    if ctx.should_stop:
        print("notice", flush=True)
        ctx.exit_suspended()
    time.sleep(0.01)
sys.exit(3)
"""


def test_a_plain_stop_reaches_a_replica_over_the_relay(tmp_path: Path) -> None:
    """The SIGTERM handler asks the relay (there is no stop file on the replica's host): a
    stop without a notice ends it at once; without the relay's answer it would count as a
    notice and save (exit 75)."""
    relay = start_relay(tmp_path)
    try:
        env = {**net_env(relay.address), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        proc = subprocess.Popen([sys.executable, "-c", STOP_SCRIPT], env=env,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        stop = tmp_path / "launches" / launch_id() / "stop.json"
        stop.parent.mkdir(parents=True, exist_ok=True)
        statedir.write_json(stop, {"signal": 15, "deadline": 0, "reason": "new round 2",
                                 "notice": None})
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == -signal.SIGTERM
        assert "notice" not in proc.stdout.read()
    finally:
        relay.close()
