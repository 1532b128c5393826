"""What a replica on a cluster node needs in its environment to reach its peers."""

from __future__ import annotations

import socket
import sys


def interface_env(address: str) -> dict[str, str]:
    """Make gloo and NCCL talk over the interface that holds `address` (left alone they bind
    to what the host name resolves to, often 127.0.0.1); empty when no interface holds it."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addrs):
            return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name,
                    "TP_SOCKET_IFNAME": name}
    return {}


def node_command(command: list[str]) -> list[str]:
    """`python` as this node's interpreter (not the controller's path)."""
    if command and command[0] in ("python", "python3"):
        return [sys.executable, *command[1:]]
    return command
