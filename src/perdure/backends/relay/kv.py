"""The rendezvous stores the relay keeps for replicas: key-value maps that outlive replicas.

Every change is appended to `<state>/rdzv/<job>/kv/<name>.jsonl` before it is acknowledged, so
a controller restart loses nothing a replica was told; a retried `add` is applied once.
"""

from __future__ import annotations

import collections
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

from perdure import statedir

STORE_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}\Z")  # .match: no trailing newline
MAX_KEYS = 100_000
MAX_BYTES = 64 << 20  # per store: keys and values
MAX_HOLD = 10.0  # seconds a wait is held before "not yet"
IDLE_EVICT = 600.0  # seconds unused before a store leaves memory (its file stays)
_RECENT_ADDS = 4096


class KVError(ValueError):
    """A request the store refuses (bad name, over a limit)."""


class KV:
    """One store: its map, its change log, and a condition for waiters."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, str] = {}
        self.nbytes = 0
        self.adds: collections.OrderedDict[tuple[str, int], int] = collections.OrderedDict()
        self.cond = threading.Condition()
        self.used = time.monotonic()
        self.waiting = 0  # requests held in wait(): a store in use is never evicted
        self._replay()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def _replay(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        for line in text.splitlines():
            try:
                rec = json.loads(line)
                self._put(str(rec["k"]), rec["v"])
                if "c" in rec:
                    self._remember_add(str(rec["c"]), int(rec["i"]), int(rec["v"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a kill: what came before still counts

    def _put(self, key: str, value: str | None) -> None:
        old = self.data.pop(key, None)
        if old is not None:
            self.nbytes -= len(key) + len(old)
        if value is not None:
            self.data[key] = str(value)
            self.nbytes += len(key) + len(value)

    def _remember_add(self, client: str, request: int, value: int) -> None:
        self.adds[(client, request)] = value
        while len(self.adds) > _RECENT_ADDS:
            self.adds.popitem(last=False)

    def _change(self, key: str, value: str | None, **extra: Any) -> None:
        """Apply and log a change (the caller holds `cond`), then wake the waiters."""
        if value is not None and key not in self.data and len(self.data) >= MAX_KEYS:
            raise KVError(f"store {self.path.stem} is full ({MAX_KEYS} keys)")
        grow = (len(key) + len(value) if value is not None else 0) - (
            len(key) + len(self.data[key]) if key in self.data else 0)
        if self.nbytes + grow > MAX_BYTES:
            raise KVError(f"store {self.path.stem} is full ({MAX_BYTES} bytes)")
        self._log.write(json.dumps({"k": key, "v": value, **extra}) + "\n")
        self._log.flush()  # in the OS before the answer: survives the controller's death
        self._put(key, value)
        self.cond.notify_all()

    def set(self, key: str, value: str) -> None:
        with self.cond:
            self._change(key, value)

    def get(self, key: str) -> str | None:
        with self.cond:
            return self.data.get(key)

    def add(self, key: str, amount: int, client: str, request: int) -> int:
        with self.cond:
            done = self.adds.get((client, request))
            if done is not None:  # a retry of an add already applied
                return done
            value = int(self.data.get(key) or 0) + amount
            self._change(key, str(value), c=client, i=request)
            self._remember_add(client, request, value)
            return value

    def cas(self, key: str, expected: str, desired: str) -> str:
        with self.cond:
            current = self.data.get(key)
            if (current is None and expected == "") or current == expected:
                self._change(key, desired)
                return desired
            return expected if current is None else current

    def append(self, key: str, value: str) -> None:
        with self.cond:
            self._change(key, self.data.get(key, "") + value)

    def delete(self, key: str) -> bool:
        with self.cond:
            if key not in self.data:
                return False
            self._change(key, None)
            return True

    def wait(self, keys: list[str], hold: float) -> bool:
        """Whether every key is there, waiting up to `hold` (capped) seconds for them."""
        with self.cond:
            self.waiting += 1
            try:
                return self.cond.wait_for(lambda: all(k in self.data for k in keys),
                                          timeout=max(0.0, min(MAX_HOLD, hold)))
            finally:
                self.waiting -= 1

    def num_keys(self) -> int:
        with self.cond:
            return len(self.data)

    def close(self) -> None:
        with self.cond:
            self._log.close()


class Stores:
    """Every job's stores under `<state>/rdzv/<job>/kv/`, opened on first use."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._open: dict[tuple[str, str], KV] = {}
        self._lock = threading.Lock()

    def get(self, job: str, name: str) -> KV:
        if not STORE_NAME.match(name):
            raise KVError(f"store name {name[:60]!r} is not allowed ([A-Za-z0-9._-], <= 128)")
        now = time.monotonic()
        with self._lock:
            kv = self._open.get((job, name))
            if kv is None:
                self._evict(now)
                kv = KV(Path(statedir.rendezvous_dir(self.state_dir, job)) / "kv" / f"{name}.jsonl")
                self._open[(job, name)] = kv
            kv.used = now
            return kv

    def _evict(self, now: float) -> None:
        for key, kv in list(self._open.items()):
            if now - kv.used > IDLE_EVICT and not kv.waiting:
                kv.close()
                del self._open[key]

    def close(self) -> None:
        with self._lock:
            for kv in self._open.values():
                kv.close()
            self._open.clear()

