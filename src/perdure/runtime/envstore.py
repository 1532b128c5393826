"""torch's env:// rendezvous without its connect backoff: wait for the store, then connect.

A rank that connects before rank 0's TCPStore listens is refused and torch's client backs
off, which is most of bringing a restarted group up. `install()` wraps the env:// handler so a
store client polls the port every POLL_SECONDS first; same store, same errors.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlparse

POLL_SECONDS = 0.005
# Then torch's own client takes over: a store that never comes fails as it would without us.
MAX_POLL_SECONDS = 60.0
_MARK = "_perdure_waits_for_store"


def install() -> bool:
    """Wrap torch's env:// handler (once per process); False if torch has none to wrap."""
    from perdure.runtime import compat

    handlers = compat.rendezvous_handlers()
    if handlers is None or not callable(handlers.get("env")):
        return False
    current: Callable[..., Any] = handlers["env"]
    if getattr(current, _MARK, False):
        return True

    def env_handler(url: str, **kwargs: Any) -> Any:
        wait_for_store(url, kwargs.get("timeout"))
        return current(url, **kwargs)

    setattr(env_handler, _MARK, True)
    handlers["env"] = env_handler
    return True


def wait_for_store(url: str, timeout: datetime.timedelta | None = None) -> bool:
    """Block until this store client's MASTER_ADDR:MASTER_PORT accepts; whether it did."""
    address = store_address(url, dict(os.environ))
    if address is None:
        return False
    limit = MAX_POLL_SECONDS if timeout is None else min(MAX_POLL_SECONDS,
                                                         timeout.total_seconds())
    deadline = time.monotonic() + limit
    while True:
        try:
            socket.create_connection(address, timeout=1.0).close()
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_SECONDS)


def store_address(url: str, env: dict[str, str]) -> tuple[str, int] | None:
    """Where this rank connects as a store client; None when it hosts the store or unknown."""
    query = parse_qs(urlparse(url).query)
    rank = (query.get("rank") or [env.get("RANK", "")])[0]
    agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT", "")
    if (rank == "0" and not agent) or not addr or not port.isdigit() or int(port) == 0:
        return None
    return addr, int(port)
