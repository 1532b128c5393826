"""The test cluster's name server: a pod's `<hostname>.<subdomain>` resolves to its address.

A real cluster runs CoreDNS for this; the test cluster has none, and a JobSet's pods find each
other by these names (MASTER_ADDR is the primary pod's). Run as host cp:

    python k8sdns.py LISTEN_ADDRESS KUBECTL KUBECONFIG

It answers A queries for `<hostname>.<subdomain>[.<namespace>[.svc[.<domain>]]]` from the API
server (the pods whose spec names that hostname and subdomain, not being deleted, with an
address), an empty answer for other types of such names, and NXDOMAIN for anything else: it
never forwards a query off the test bridge.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time

CACHE_SECONDS = 0.5
NXDOMAIN, NOERROR = 3, 0
TYPE_A, CLASS_IN = 1, 1


def _question(packet: bytes) -> tuple[list[str], int, int]:
    """The first question's labels, type and the offset after it."""
    labels, i = [], 12
    while packet[i]:
        n = packet[i]
        labels.append(packet[i + 1:i + 1 + n].decode("ascii", "replace").lower())
        i += n + 1
    qtype = struct.unpack("!H", packet[i + 1:i + 3])[0]
    return labels, qtype, i + 5


class Pods:
    """The API server's pods, as (hostname, subdomain, namespace) -> addresses, cached."""

    def __init__(self, kubectl: str, kubeconfig: str) -> None:
        self.argv = [kubectl, "--kubeconfig", kubeconfig, "get", "pods", "-A", "-o", "json"]
        self.at = 0.0
        self.names: dict[tuple[str, str, str], list[str]] = {}

    def lookup(self, host: str, sub: str, namespace: str | None) -> list[str]:
        if time.monotonic() - self.at > CACHE_SECONDS:
            self._load()
        return [a for (h, s, ns), addrs in self.names.items() for a in addrs
                if (h, s) == (host, sub) and namespace in (None, ns)]

    def _load(self) -> None:
        r = subprocess.run(self.argv, capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
            print(f"k8sdns: kubectl: {r.stderr.strip()}", file=sys.stderr, flush=True)
            return
        names: dict[tuple[str, str, str], list[str]] = {}
        for pod in json.loads(r.stdout)["items"]:
            spec, meta = pod["spec"], pod["metadata"]
            addr = pod.get("status", {}).get("podIP")
            if spec.get("hostname") and spec.get("subdomain") and addr \
                    and not meta.get("deletionTimestamp"):
                key = (spec["hostname"], spec["subdomain"], meta["namespace"])
                names.setdefault(key, []).append(addr)
        self.names, self.at = names, time.monotonic()


def answer(packet: bytes, pods: Pods) -> bytes:
    labels, qtype, end = _question(packet)
    found: list[str] = []
    rcode = NXDOMAIN
    if len(labels) >= 2:
        namespace = labels[2] if len(labels) >= 3 else None
        found = pods.lookup(labels[0], labels[1], namespace)
        rcode = NOERROR if found else NXDOMAIN
    records = [a for a in found if qtype == TYPE_A]
    flags = 0x8000 | (packet[2] & 0x01) << 8 | 0x0400 | 0x0080 | rcode  # QR RD AA RA
    header = struct.pack("!HHHHHH", struct.unpack("!H", packet[:2])[0], flags, 1,
                         len(records), 0, 0)
    body = packet[12:end]
    for a in records:
        body += struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, 5, 4) + socket.inet_aton(a)
    return header + body


def serve(address: str, kubectl: str, kubeconfig: str) -> None:
    pods = Pods(kubectl, kubeconfig)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, 53))
    print(f"k8sdns: serving on {address}:53", flush=True)
    while True:
        packet, peer = sock.recvfrom(512)
        try:
            sock.sendto(answer(packet, pods), peer)
        except (IndexError, struct.error, UnicodeError):
            continue  # not a query this server understands: no answer


if __name__ == "__main__":
    serve(*sys.argv[1:4])
