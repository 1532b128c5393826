"""The snapshot holder admits only its own job: each attack a stranger could try on it fails.

A stranger speaks the holder's frame format (8-byte length, JSON header, payload) over a raw
socket, without the job's secret. Real sockets, holders in this process.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.holders import fetch_bytes

from perdure.runtime.elastic import Snapshotter
from perdure.runtime.elastic import holder as hd

SECRET = "a3" * 32
FRAME = struct.Struct(">I")


@pytest.fixture
def holder() -> Iterator[hd.Holder]:
    h = hd.Holder(keep=2, secret=SECRET, allowed=lambda name: name in ("worker-0", "worker-1"))
    yield h
    h.close()


def address(h: hd.Holder) -> hd.HolderAddress:
    return hd.HolderAddress("worker-1", "127.0.0.1", h.port)


def stranger(port: int, header: dict[str, object], payload: bytes = b"",
             timeout: float = 2.0) -> bytes:
    """Send one request as an attacker would; everything the holder sent back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        body = json.dumps(header).encode()
        sock.sendall(FRAME.pack(len(body)) + body + payload)
        got = b""
        try:
            while chunk := sock.recv(1 << 16):
                got += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return got


def test_a_forged_snapshot_is_refused_and_evicts_nothing(holder: hd.Holder) -> None:
    holder.store("worker-0", 20, b"real-20")
    holder.store("worker-0", 30, b"real-30")
    for step in (10**12, 10**12 + 1):
        stranger(holder.port, {"op": "put", "replica": "worker-0", "step": step, "size": 6,
                               "meta": {}}, b"forged")
    assert holder.steps("worker-0") == [20, 30]
    assert bytes(fetch_bytes(address(holder), "worker-0", 30, secret=SECRET)) == b"real-30"


def test_weights_are_served_to_no_stranger(holder: hd.Holder) -> None:
    weights = b"secret-weights" * 100
    holder.store("worker-0", 5, weights)
    got = stranger(holder.port, {"op": "get", "replica": "worker-0", "step": 5})
    assert b"secret-weights" not in got
    listed = stranger(holder.port, {"op": "list", "replica": "worker-0"})
    assert b"steps" not in listed


def test_made_up_replica_names_are_not_kept(holder: hd.Holder) -> None:
    for i in range(200):  # without the secret
        stranger(holder.port, {"op": "put", "replica": f"made-up-{i}", "step": 1, "size": 1,
                               "meta": {}}, b"x")
    with pytest.raises(ConnectionError, match="refused"):  # with it, still not a job replica
        hd.put(address(holder), "made-up-x", 1, [b"x"], secret=SECRET)
    assert holder.nbytes == 0
    hd.put(address(holder), "worker-0", 1, [b"x"], secret=SECRET)
    assert holder.nbytes == 1


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_small_header_allocates_no_large_buffer(holder: hd.Holder) -> None:
    before = _rss()
    with socket.create_connection(("127.0.0.1", holder.port), timeout=2.0) as sock:
        body = json.dumps({"op": "put", "replica": "worker-0", "step": 1, "size": 256 << 20,
                           "meta": {}}).encode()
        sock.sendall(FRAME.pack(len(body)) + body)  # ~70 bytes claiming 256 MiB
        time.sleep(0.5)  # the holder had time to allocate
        grew = _rss() - before
    assert grew < 64 << 20, f"the holder allocated {grew >> 20} MiB for a 70-byte header"


def test_an_authenticated_peer_is_still_held_to_the_size_cap() -> None:
    h = hd.Holder(keep=1, secret=SECRET, allowed=lambda name: True, max_bytes=1 << 20)
    try:
        with pytest.raises(ConnectionError, match="over the holder's limit"):
            hd.put(address(h), "worker-0", 1, [bytes(2 << 20)], secret=SECRET)
        assert h.nbytes == 0
    finally:
        h.close()


def test_a_peer_with_another_jobs_secret_is_refused(holder: hd.Holder) -> None:
    holder.store("worker-0", 5, b"weights")
    other = "b4" * 32
    with pytest.raises(ConnectionError, match="refused"):
        hd.put(address(holder), "worker-0", 6, [b"x"], secret=other)
    assert hd.list_steps(address(holder), "worker-0", secret=other) == []
    with pytest.raises(ConnectionError):
        fetch_bytes(address(holder), "worker-0", 5, secret=other)
    assert holder.steps("worker-0") == [5]


def test_a_holder_without_the_secret_is_not_believed() -> None:
    """A process that took over a dead holder's port cannot serve forged weights."""
    rogue = hd.Holder(keep=1, secret="c5" * 32, allowed=lambda name: True)
    try:
        rogue.store("worker-0", 99, b"forged")
        assert hd.list_steps(address(rogue), "worker-0", secret=SECRET) == []
        with pytest.raises(ConnectionError, match="not authenticated"):
            fetch_bytes(address(rogue), "worker-0", 99, secret=SECRET)
    finally:
        rogue.close()


def _listening_address(port: int) -> str:
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        host, _, hex_port = local.partition(":")
        if int(hex_port, 16) == port and state == "0A":  # LISTEN
            return socket.inet_ntoa(struct.pack("<I", int(host, 16)))
    raise AssertionError(f"nothing listens on port {port}")


def test_the_holder_binds_to_the_jobs_interface_never_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_RDZV_DIR", str(tmp_path))
    monkeypatch.setenv("PERDURE_REPLICA", "worker-0")
    monkeypatch.setenv("PERDURE_JOB_SECRET", SECRET)
    monkeypatch.delenv("PERDURE_SNAPSHOT_BIND", raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.3")  # loopback, but not 127.0.0.1
    snap = Snapshotter()
    try:
        doc = json.loads((tmp_path / "holders" / "worker-0.json").read_text())
        assert _listening_address(int(doc["port"])) == "127.0.0.1"
        assert doc["host"] == "127.0.0.1"
    finally:
        snap.close()
    monkeypatch.setenv("PERDURE_SNAPSHOT_BIND", "0.0.0.0")
    with pytest.raises(ValueError, match=r"PERDURE_SNAPSHOT_BIND=0\.0\.0\.0"):
        Snapshotter()


PROBE = """
import json, os, socket, struct, sys
from pathlib import Path
from perdure.runtime.elastic import Snapshotter
snap = Snapshotter()
doc = json.loads((Path(os.environ["PERDURE_RDZV_DIR"]) / "holders" / "worker-0.json").read_text())
for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
    local, state = line.split()[1], line.split()[3]
    host, _, port = local.partition(":")
    if int(port, 16) == doc["port"] and state == "0A":
        print(json.dumps({"bound": socket.inet_ntoa(struct.pack("<I", int(host, 16))),
                          "advertised": doc["host"]}))
snap.close()
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                    reason="needs root and iproute2")
@pytest.mark.parametrize("toward", ["master", "relay"])
def test_on_a_network_the_holder_binds_to_the_interface_the_job_uses(
        toward: str, tmp_path: Path) -> None:
    """A host of its own (a network namespace with an interface of 10.N.M.2/24, both ends of
    its veth pair inside) whose MASTER_ADDR is 10.N.M.1 (or loopback, with the controller's
    relay at 10.N.M.1): the holder listens on 10.N.M.2."""
    ns = f"phold{os.getpid()}{secrets.token_hex(2)}"
    net = f"10.{secrets.randbelow(200) + 20}.{secrets.randbelow(250)}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for cmd in (["ip", "link", "set", "lo", "up"],
                    ["ip", "link", "add", "va", "type", "veth", "peer", "name", "vb"],
                    ["ip", "addr", "add", f"{net}.2/24", "dev", "va"],
                    ["ip", "link", "set", "vb", "up"],
                    ["ip", "link", "set", "va", "up"]):
            subprocess.run(["ip", "netns", "exec", ns, *cmd], check=True)
        env = {**os.environ, "MASTER_ADDR": f"{net}.1", "PERDURE_RDZV_DIR": str(tmp_path),
               "PERDURE_REPLICA": "worker-0", "PERDURE_JOB_SECRET": SECRET}
        env.pop("PERDURE_SNAPSHOT_BIND", None)
        if toward == "relay":  # an elastic job on a cluster: MASTER_ADDR says nothing
            env.update(MASTER_ADDR="127.0.0.1", PERDURE_CONTROL_ADDR=f"{net}.1:7000")
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", PROBE],
                             env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"bound": f"{net}.2", "advertised": f"{net}.2"}
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_a_hostile_header_is_dropped_quietly(holder: hd.Holder,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    for header in (b"[" * 60000, b'{"op": "put", ' + b'"x": ' * 10000 + b"1}", b"\xff" * 100):
        with socket.create_connection(("127.0.0.1", holder.port), timeout=2.0) as sock:
            sock.sendall(FRAME.pack(len(header)) + header)
            with contextlib.suppress(OSError):
                sock.recv(1 << 16)
    time.sleep(0.2)
    assert "Traceback" not in capfd.readouterr().err
    hd.put(address(holder), "worker-0", 1, [b"x"], secret=SECRET)  # still serving
    assert holder.steps("worker-0") == [1]


def test_a_flood_of_idle_connections_ties_up_a_bounded_number_of_threads(
        holder: hd.Holder) -> None:
    before = {t.ident for t in threading.enumerate()}  # other tests' threads are not counted
    flood = [socket.create_connection(("127.0.0.1", holder.port)) for _ in
             range(hd.MAX_CONNECTIONS + 20)]
    try:
        time.sleep(0.3)
        threads = [t for t in threading.enumerate() if t.is_alive() and t.ident not in before]
        assert len(threads) <= hd.MAX_CONNECTIONS  # not one per connection
    finally:
        for sock in flood:
            sock.close()
    time.sleep(0.3)  # their handlers see the end of input and give their slots back
    hd.put(address(holder), "worker-0", 1, [b"x"], secret=SECRET)
    assert holder.steps("worker-0") == [1]
