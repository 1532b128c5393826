"""How a replica's runtime reaches its controller: files on one host, the network on many.

Runtime modules go through `current()` (PERDURE_TRANSPORT: file or net), never the files.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from perdure.runtime.transport.base import (
    ENV_CONTROL_ADDR,
    ENV_JOB_SECRET,
    ENV_RDZV,
    ENV_TRANSPORT,
    HolderRecord,
    Transport,
    TransportError,
)
from perdure.runtime.transport.files import FileTransport
from perdure.runtime.transport.net import NetTransport

__all__ = [
    "ENV_CONTROL_ADDR",
    "ENV_JOB_SECRET",
    "ENV_RDZV",
    "ENV_TRANSPORT",
    "FileTransport",
    "HolderRecord",
    "NetTransport",
    "Transport",
    "TransportError",
    "current",
    "from_env",
    "of",
]

Where = Transport | str | os.PathLike[str]

_current: Transport | None = None
_made_from: tuple[str | None, ...] = ()
_lock = threading.Lock()
# The variables a transport is made from: a change (a test, a standby handed a replica's
# environment) makes a new one.
_KEYS = (ENV_TRANSPORT, ENV_CONTROL_ADDR, ENV_JOB_SECRET, ENV_RDZV, "PERDURE_RDZV_DIR",
         "PERDURE_REPORT_DIR", "PERDURE_STOP_FILE", "PERDURE_ERROR_FILE", "PERDURE_JOB_ID",
         "PERDURE_REPLICA", "PERDURE_LAUNCH_ID")


def from_env(env: Mapping[str, str]) -> Transport:
    """The transport `env` asks for; ValueError naming the variable when it is wrong."""
    kind = env.get(ENV_TRANSPORT) or "file"
    if kind == "file":
        return FileTransport.from_env(env)
    if kind == "net":
        return NetTransport.from_env(env)
    raise ValueError(f"{ENV_TRANSPORT}={kind!r} is unknown: use 'file' or 'net'")


def current() -> Transport:
    """This process's transport, made from its environment (again when that changed)."""
    global _current, _made_from
    key = tuple(os.environ.get(k) for k in _KEYS)
    with _lock:
        if _current is None or key != _made_from:
            _current, _made_from = from_env(os.environ), key
        return _current


def of(where: Where) -> Transport:
    """`where` itself, or the file transport of the rendezvous directory `where`."""
    if isinstance(where, (str, os.PathLike)):
        return FileTransport(rdzv_dir=where)
    return where
