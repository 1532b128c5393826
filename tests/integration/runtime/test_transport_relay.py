"""The controller's relay admits only the job's own replicas, holding its secret, and refuses
what is too big before it allocates it; its stores survive a restart and count a retried
`add` once."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from transport_pair import JOB, SECRET, launch_id, net_env, start_relay

from perdure import statedir
from perdure.backends.relay import server as relay_module
from perdure.backends.relay.server import Relay, RelayError
from perdure.runtime.elastic.barrier import Formed, meet
from perdure.runtime.elastic.rendezvous import Member, Round
from perdure.runtime.transport import NetTransport, TransportError, from_env
from perdure.runtime.transport import net as net_module
from perdure.runtime.transport.client import Refused
from perdure.runtime.transport.wire import mac, recv_frame, send_frame


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    r = start_relay(tmp_path)
    yield r
    r.close()


def net(relay: Relay, **kw: str) -> NetTransport:
    t = from_env(net_env(relay.address, **kw))
    assert isinstance(t, NetTransport)
    return t


@pytest.mark.parametrize(("who", "why"), [
    ({"secret": "f0" * 32}, "wrong job secret"),
    ({"secret": "other-job-u", "job": "job-u", "replica": "worker-0",
      "launch": "job-t.1.worker-0.0"}, "is not one of worker-0 of job job-u"),
    ({"replica": "worker-9", "launch": "job-t.1.worker-9.0"}, "not a replica of job job-t"),
    ({"launch": launch_id("worker-1")}, "not one of worker-0"),
    ({"job": "job-x"}, "no job job-x"),
])
def test_only_the_jobs_own_replicas_with_its_secret_get_in(relay: Relay, tmp_path: Path,
                                                          who: dict[str, str], why: str) -> None:
    t = net(relay, **who)
    with pytest.raises(Refused, match=why):
        t.mark_ready(1, "worker-0", 0)
    with pytest.raises(Refused):  # reads too: nothing of the job is shown to a stranger
        t.holders()
    assert not (tmp_path / "rdzv").exists()


def test_no_secret_no_entry(relay: Relay) -> None:
    with pytest.raises(ValueError, match="needs PERDURE_JOB_SECRET"):  # the replica's side
        net(relay, secret="")
    sock, _ = _hello(relay)  # the relay's side: a handshake without a proof
    with sock:
        send_frame(sock, {"job": JOB, "replica": "worker-0", "launch": launch_id()})
        reply = recv_frame(sock)
        assert not reply["ok"] and "wrong job secret" in reply["error"]
        assert _closed(sock, 5)


def test_a_replica_speaks_only_for_itself(relay: Relay) -> None:
    t = net(relay)
    with pytest.raises(Refused, match="only its own holder"):
        t.register_holder({"replica": "worker-1", "host": "10.0.0.1", "port": 1, "pid": 1})
    with pytest.raises(Refused, match="not a replica"):
        t.ready_round(1, "../../etc")


def _hello(relay: Relay) -> tuple[socket.socket, str]:
    sock = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
    return sock, str(recv_frame(sock)["nonce"])


def _closed(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


def test_an_oversized_frame_is_refused_before_it_is_read(relay: Relay) -> None:
    tracemalloc.start()
    try:
        sock, _ = _hello(relay)  # unauthenticated: claims 1 GiB
        with sock:
            sock.sendall(struct.pack(">I", 1 << 30) + b"{")
            assert _closed(sock, 5)
        sock, nonce = _hello(relay)  # authenticated, then claims 512 MiB
        with sock:
            send_frame(sock, {"job": JOB, "replica": "worker-0", "launch": launch_id(),
                              "mac": mac(SECRET, nonce, JOB, "worker-0", launch_id())})
            assert recv_frame(sock)["ok"]
            sock.sendall(struct.pack(">I", 512 << 20) + b"{" * 1000)
            assert _closed(sock, 5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak} bytes allocated"
    net(relay).mark_ready(1, "worker-0", 0)  # and it still serves the others


def test_a_connection_that_does_not_authenticate_is_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay_module, "HANDSHAKE_SECONDS", 0.2)
    r = start_relay(tmp_path)
    try:
        sock, _ = _hello(r)
        with sock:
            assert _closed(sock, 5)  # said nothing
        sock, _ = _hello(r)
        with sock:
            send_frame(sock, {"op": "holders"})  # a request instead of the handshake
            reply = recv_frame(sock)
            assert not reply["ok"] and "perdure names" in reply["error"]
            assert _closed(sock, 5)
    finally:
        r.close()


def test_the_relay_listens_only_where_it_is_told(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay_module, "_BIND_RETRY_SECONDS", 0.2)
    r = start_relay(tmp_path)
    try:
        assert r.address == f"127.0.0.1:{r.port}"
        recorded = json.loads((tmp_path / statedir.RELAY).read_text())
        assert (recorded["bind"], recorded["port"]) == ("127.0.0.1", r.port)
        with pytest.raises(RelayError, match="recorded in"):  # its port is taken: say why
            start_relay(tmp_path)
    finally:
        r.close()
    with pytest.raises(RelayError, match="not an address of this host"):
        Relay.start(tmp_path / "other", "192.0.2.1")  # TEST-NET-1: never a local address


def test_stores_come_back_after_a_restart_and_count_a_retried_add_once(tmp_path: Path) -> None:
    r = start_relay(tmp_path)
    t = net(r)
    store = t.round_store("store-1-0")
    store.set("g0/member/worker-0", "123")
    assert store.add("g0/present", 1) == 1
    request = {"store": "store-1-0", "key": "g0/present", "amount": 1, "c": "abc", "i": 7}
    assert t.client.call("kv.add", request, deadline=time.monotonic() + 5) == 2
    assert t.client.call("kv.add", request, deadline=time.monotonic() + 5) == 2  # a retry
    r.close()
    r = start_relay(tmp_path)
    try:
        assert store.get("g0/member/worker-0") == b"123"  # the same client, reconnected
        assert store.add("g0/present", 0) == 2
        assert t.client.call("kv.add", request, deadline=time.monotonic() + 5) == 2
        assert store.compare_set("g0/decision", "", "ok") == b"ok"
        began = time.monotonic()
        with pytest.raises(Exception, match="timed out"):
            store.wait(["never"], __import__("datetime").timedelta(seconds=0.3))
        assert time.monotonic() - began < 3
        with pytest.raises(Refused, match="not allowed"):
            t.round_store("../escape").set("k", "v")
    finally:
        r.close()
    with pytest.raises(TransportError):  # down: a store operation fails at its deadline
        t.client.call("kv.get", {"store": "store-1-0", "key": "k"},
                      deadline=time.monotonic() + 0.2)


def test_a_barrier_waits_through_a_controller_restart(tmp_path: Path) -> None:
    """worker-0 enters a round's barrier, the relay goes away and comes back (a controller
    restart), worker-1 arrives: both meet, in the store the relay read back."""
    rnd = Round(JOB, 1, 0, "test", 0.0, (Member("worker-0", 0, "a"), Member("worker-1", 1, "b")))
    r = start_relay(tmp_path)
    first = net(r, replica="worker-0")
    out: dict[str, Formed] = {}
    waiting = threading.Thread(target=lambda: out.update(w0=meet(
        first, rnd, "worker-0", deadline=time.monotonic() + 30, superseded=lambda: False)[0]))
    waiting.start()
    kv = tmp_path / "rdzv" / JOB / "kv" / f"{rnd.store_name}.jsonl"
    deadline = time.monotonic() + 10
    while "g0/member/worker-0" not in (kv.read_text() if kv.exists() else ""):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    r.close()
    time.sleep(0.5)  # worker-0 keeps waiting, its requests retried
    r = start_relay(tmp_path)
    try:
        second = net(r, replica="worker-1")
        formed, _ = meet(second, rnd, "worker-1", deadline=time.monotonic() + 30,
                         superseded=lambda: False)
        waiting.join(30)
    finally:
        r.close()
    assert formed.status == "ok" and out["w0"].status == "ok"


def test_each_local_rank_sends_its_own_error_record(relay: Relay, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica of several processes: rank 1's error does not overwrite rank 0's."""
    monkeypatch.setenv("PERDURE_PROCS_PER_REPLICA", "2")
    for rank in (0, 1):
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        net(relay).write_error({"type": "ValueError", "message": f"rank {rank}"})
    d = tmp_path / "launches" / launch_id()
    first = json.loads((d / "error.json").read_text())
    second = json.loads((d / "error.1.json").read_text())
    assert (first["message"], second["message"]) == ("rank 0", "rank 1")


def test_progress_held_while_the_relay_is_away_is_bounded_and_arrives_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(net_module, "MAX_UNSENT_LINES", 5)
    r = start_relay(tmp_path)
    t = net(r)
    r.close()  # a controller restart: the replica's reports wait
    t.append_progress([json.dumps({"kind": "note", "n": n}) for n in range(3)])
    t.append_progress([json.dumps({"kind": "note", "n": n}) for n in range(3, 6)])
    assert "3 progress records dropped" in caplog.text  # over the bound: memory stays bounded
    assert not t.flush_progress(0.3)
    r = start_relay(tmp_path)
    try:
        assert t.flush_progress(10)
    finally:
        r.close()
    path = tmp_path / "launches" / launch_id() / "progress.jsonl"
    assert [json.loads(line)["n"] for line in path.read_text().splitlines()] == [0, 1, 2]
