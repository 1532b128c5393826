"""Rank 0's port: every backend picks it, on rank 0's node, once for each group of launches
that share a master (`Launch.master_key`: an attempt, or a group restart's round).

Side effects: `local_port` binds and closes a socket on 127.0.0.1.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

NO_PORT = "29500"  # torch's default, when rank 0's node is going (the group restarts)


class MasterPorts:
    """The port of each job's current master key, asked of rank 0's node (`probe`) once."""

    def __init__(self) -> None:
        self._ports: dict[str, tuple[str, str]] = {}  # job id -> (master key, port)

    def port(self, job_id: str, key: str, probe: Callable[[], str | None]) -> str:
        """The port every launch of `key` gets; `probe` asks rank 0's node for a free one
        (None: it could not answer, and the launch gets NO_PORT)."""
        known = self._ports.get(job_id)
        if known is not None and known[0] == key:
            return known[1]
        port = probe()
        if known is not None and port == known[1]:
            port = probe()  # the last round's master may hold it still
        if port is None:
            return NO_PORT
        self._ports[job_id] = (key, port)
        return port


def local_port() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])
