"""Progress records on their way to the relay: queued, sent in order, re-sent after an outage.

The training loop never waits for the network: `add` queues lines and returns. A daemon
thread sends them in batches (each under the frame limit), numbered, so that a batch re-sent
after a lost answer is appended once. While the relay cannot be reached the lines wait
(up to MAX_PENDING_LINES, the oldest dropped first and counted) and go out when it is back.

Side effects: a daemon thread; requests through the client.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

from perdure.runtime.transport.base import TransportError
from perdure.runtime.transport.client import Refused
from perdure.runtime.transport.wire import MAX_FRAME

__all__ = ["ProgressSender"]

log = logging.getLogger("perdure.transport")
MAX_PENDING_LINES = 100_000
_BATCH_BYTES = MAX_FRAME // 2  # room for the request's own fields and JSON escaping
_RETRY_SECONDS = 30.0  # one attempt's deadline; the sender then tries again


class ProgressSender:
    """Sends queued lines with `send(seq, lines)` (raises TransportError on failure)."""

    def __init__(self, send: Callable[[int, list[str]], None]) -> None:
        self._send = send
        self._pending: collections.deque[str] = collections.deque()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._seq = 0
        self.dropped = 0
        self._thread: threading.Thread | None = None

    def add(self, lines: list[str]) -> None:
        with self._cond:
            self._pending.extend(lines)
            over = len(self._pending) - MAX_PENDING_LINES
            for _ in range(max(0, over)):
                self._pending.popleft()
            self.dropped += max(0, over)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="perdure-progress",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _batch(self) -> list[str]:
        out: list[str] = []
        size = 0
        while self._pending and (not out or size + len(self._pending[0]) < _BATCH_BYTES):
            line = self._pending.popleft()
            if len(line) >= _BATCH_BYTES:  # cannot be sent whole; nothing reads such a line
                self.dropped += 1
                continue
            out.append(line)
            size += len(line) + 8
        return out

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                batch = self._batch()
                self._in_flight = len(batch)
                self._seq += 1
                seq = self._seq
            while batch:
                try:
                    self._send(seq, batch)
                    break
                except Refused as exc:  # will not change by retrying: say so, go on
                    log.warning("%d progress records refused by the relay: %s", len(batch), exc)
                    self.dropped += len(batch)
                    break
                except TransportError as exc:  # the relay is down: keep the batch, try again
                    log.debug("progress not delivered yet: %s", exc)
                    time.sleep(0.2)
            with self._cond:
                self._in_flight = 0
                self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until everything queued was delivered; False if `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

