"""The snapshot holder's wire: framed JSON headers, mutual authentication, where to bind.

Headers are the relay's frames (transport/wire.py), at most `MAX_HEADER` bytes; payload bytes
may follow. Each side sends a nonce, and a request (a reply) carries the
HMAC-SHA256 of the job secret over the other side's nonce and the document: a stranger is
refused before its payload is read. Payloads are not MACed: run jobs on a private network.

Side effects: socket I/O only.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import socket
from typing import Any

from perdure.runtime.transport.base import ENV_JOB_SECRET
from perdure.runtime.transport.wire import recv_frame, send_frame

MAX_HEADER = 64 << 10
HANDSHAKE_SECONDS = 10.0  # a connection that does not speak within this is dropped
_NONCE = 16


def mac(secret: str, label: bytes, nonce: bytes, doc: dict[str, Any]) -> str:
    """HMAC of `doc` (canonical JSON, without `auth`) under `secret`, bound to `nonce`."""
    body = json.dumps({k: v for k, v in doc.items() if k != "auth"}, sort_keys=True,
                      separators=(",", ":")).encode()
    return hmac.new(secret.encode(), label + b"\n" + nonce + body, hashlib.sha256).hexdigest()


def verified(secret: str, label: bytes, nonce: bytes, doc: dict[str, Any]) -> bool:
    claimed = doc.get("auth")
    return isinstance(claimed, str) and hmac.compare_digest(
        claimed.encode(), mac(secret, label, nonce, doc).encode())


def _nonce(doc: dict[str, Any]) -> bytes:
    try:
        value = bytes.fromhex(doc["nonce"])
    except (KeyError, TypeError, ValueError):
        value = b""
    if len(value) != _NONCE:
        raise ConnectionError("the peer sent no valid nonce: not a perdure snapshot holder")
    return value


class Accepted:
    """The server's side of one connection: challenge, then authenticated request and replies."""

    def __init__(self, sock: socket.socket, secret: str) -> None:
        self.sock, self.secret = sock, secret
        self.nonce = os.urandom(_NONCE)
        self.peer_nonce = b""
        sock.settimeout(HANDSHAKE_SECONDS)
        send_frame(sock, {"v": 2, "nonce": self.nonce.hex()})

    def request(self) -> dict[str, Any] | None:
        """The client's request if it proves the secret; None (after saying why) otherwise."""
        doc = recv_frame(self.sock, MAX_HEADER)
        if not verified(self.secret, b"request", self.nonce, doc):
            send_frame(self.sock, {"ok": False, "error": "not authenticated: this holder "
                                   f"serves only its own job's replicas (${ENV_JOB_SECRET})"})
            return None
        self.peer_nonce = _nonce(doc)
        self.sock.settimeout(60.0)
        return doc

    def reply(self, doc: dict[str, Any], payload: bytes | bytearray = b"") -> None:
        send_frame(self.sock, {**doc, "auth": mac(self.secret, b"reply", self.peer_nonce, doc)})
        if payload:
            self.sock.sendall(payload)


class Connected:
    """The client's side of one connection to `who` at host:port (raises OSError on failure)."""

    def __init__(self, host: str, port: int, secret: str, timeout: float, who: str) -> None:
        self.secret, self.who = secret, who
        self.nonce = os.urandom(_NONCE)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.server_nonce = _nonce(recv_frame(self.sock, MAX_HEADER))
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send the signed request; the verified reply (ConnectionError if refused)."""
        doc = {**request, "nonce": self.nonce.hex()}
        send_frame(self.sock,
                   {**doc, "auth": mac(self.secret, b"request", self.server_nonce, doc)})
        return self.answer()

    def answer(self) -> dict[str, Any]:
        reply = recv_frame(self.sock, MAX_HEADER)
        if not verified(self.secret, b"reply", self.nonce, reply):
            why = reply.get("error") or "its reply does not prove the job's secret"
            raise ConnectionError(f"{self.who} refused the request or is not authenticated: "
                                  f"{str(why)[:200]}")
        if not reply.get("ok"):
            why = str(reply.get("error"))[:200]
            raise ConnectionError(f"{self.who} refused the request: {why}")
        return reply


def interface_for(master_addr: str) -> str:
    """This host's address toward `master_addr` (the kernel's route; OSError when none)."""
    if master_addr in ("", "localhost"):
        return "127.0.0.1"
    try:
        ip = ipaddress.ip_address(master_addr)
    except ValueError:  # a host name
        ip = ipaddress.ip_address(socket.getaddrinfo(master_addr, None)[0][4][0])
    if ip.is_loopback:
        return "::1" if ip.version == 6 else "127.0.0.1"
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((str(ip), 9))
        return str(probe.getsockname()[0])


def check_bind(host: str, what: str) -> None:
    """ValueError if `host` is a wildcard address, resolved as `bind` would (`0`, `0x0`)."""
    if host in ("", "<broadcast>"):
        raise ValueError(f"{what}={host!r} would accept peers on every interface; name the "
                         "address of the one interface the job uses")
    try:
        found = {str(a[4][0]) for a in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"{what}={host!r} is not an address of this host ({exc}); name the "
                         "address of the one interface the job uses") from None
    for address in found:
        ip = ipaddress.ip_address(address.partition("%")[0])  # drop an IPv6 scope
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        if ip.is_unspecified or (mapped is not None and mapped.is_unspecified):
            raise ValueError(f"{what}={host} is {address}, which would accept peers on every "
                             "interface; name the address of the one interface the job uses")
