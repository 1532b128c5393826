"""A torch.distributed.Store kept by the controller's relay, not by any training replica.

A replica's death never takes it away. A blocking `get` / `wait` is a series of long polls,
so a relay outage only makes it wait longer. Values travel as latin-1 text (bytes, losslessly).

Side effects: requests to the relay.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import torch.distributed as dist

from perdure.runtime.transport.client import RelayClient

__all__ = ["RelayStore"]

_POLL = 5.0  # seconds the relay holds a blocking request before answering "not yet"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return bytes(value).decode("latin-1")


class RelayStore(dist.Store):  # type: ignore[name-defined,misc]
    """The store `name` of this replica's job, on the relay (see the module docstring)."""

    def __init__(self, client: RelayClient, name: str, timeout: float = 300.0) -> None:
        super().__init__()
        self._client, self._name, self._timeout = client, name, timeout

    def _call(self, op: str, timeout: float | None = None, **args: Any) -> Any:
        limit = self._timeout if timeout is None else timeout
        return self._client.call(f"kv.{op}", {"store": self._name, **args},
                                 deadline=time.monotonic() + limit, reply_timeout=_POLL + 10)

    def set(self, key: str, value: Any) -> None:
        self._call("set", key=key, value=_text(value))

    def get(self, key: str) -> bytes:
        self.wait([key])
        value = self._call("get", key=key)
        if value is None:  # deleted between the wait and the read
            raise dist.DistStoreError(f"key {key!r} of store {self._name} is gone")
        return str(value).encode("latin-1")

    def add(self, key: str, amount: int) -> int:
        return int(self._call("add", key=key, amount=int(amount)))

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        value = self._call("cas", key=key, expected=_text(expected), desired=_text(desired))
        return str(value).encode("latin-1")

    def check(self, keys: list[str]) -> bool:
        return bool(self._call("check", keys=list(keys)))

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        limit = self._timeout if timeout is None else timeout.total_seconds()
        deadline = time.monotonic() + limit
        while True:
            remaining = deadline - time.monotonic()
            if self._call("wait", timeout=max(remaining, 0.1), keys=list(keys),
                          hold=max(0.0, min(_POLL, remaining))):
                return
            if time.monotonic() >= deadline:
                raise dist.DistStoreError(
                    f"timed out after {limit:g}s waiting for keys {list(keys)} in store "
                    f"{self._name} on the relay {self._client.host}:{self._client.port}")

    def delete_key(self, key: str) -> bool:
        return bool(self._call("delete", key=key))

    def num_keys(self) -> int:
        return int(self._call("num_keys"))

    def append(self, key: str, value: Any) -> None:
        self._call("append", key=key, value=_text(value))
