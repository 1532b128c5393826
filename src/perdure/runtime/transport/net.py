"""The network transport: the runtime's contracts as requests to the controller's relay.

For replicas on hosts that do not see the controller's state dir. Polled reads give the last
answer while the relay is away instead of stalling; writes that must arrive are retried.
Progress records are sent in order by a daemon thread, in numbered batches (a batch re-sent
after a lost answer is appended once), and kept while the relay is away.

Side effects: TCP connections to the relay; a daemon thread for progress records.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

from perdure.runtime.checkpoint.worker import PersistWorker
from perdure.runtime.ranks import PROCS_ENV
from perdure.runtime.transport.base import (
    ENV_CONTROL_ADDR,
    ENV_JOB_SECRET,
    ENV_RDZV,
    HolderRecord,
    TransportError,
)
from perdure.runtime.transport.client import Refused, RelayClient
from perdure.runtime.transport.files import FileTransport
from perdure.runtime.transport.wire import MAX_FRAME, parse_addr

__all__ = ["NetTransport"]

log = logging.getLogger("perdure.transport")
WRITE_SECONDS = 60.0  # markers and holder records: a controller restart fits in this
ERROR_SECONDS = 10.0  # the error record: the replica is exiting
STOP_SECONDS = 2.0  # the stop notice is read in a signal handler
POLL_SECONDS = 1.0  # reads polled in loops (the round, markers, holders)
PROGRESS_SECONDS = 30.0  # one attempt to send a batch of progress; the sender then tries again
MAX_UNSENT_LINES = 100_000  # progress lines held while the relay is away; later ones are dropped
_BATCH_BYTES = MAX_FRAME // 2  # room for the request's own fields and JSON escaping


class NetTransport:
    """A client of the relay; `local`: the stop and error files, for when it is away."""

    kind = "net"
    reports = True  # progress always goes to the relay

    def __init__(self, client: RelayClient, *, elastic: bool,
                 local: FileTransport | None = None) -> None:
        self.client = client
        self.elastic = elastic
        self.local = local or FileTransport()
        self._progress = PersistWorker("perdure-progress", lower=False, finish_at_exit=False)
        self._progress_sent: threading.Event | None = None
        self._unsent = 0  # lines submitted and not yet sent (a relay outage bounds memory)
        self._unsent_lock = threading.Lock()
        self._seqs = itertools.count(1)
        self._stores: dict[str, Any] = {}

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> NetTransport:
        missing = [k for k in (ENV_CONTROL_ADDR, ENV_JOB_SECRET, "PERDURE_JOB_ID",
                               "PERDURE_REPLICA", "PERDURE_LAUNCH_ID") if not env.get(k)]
        if missing:
            raise ValueError(
                f"PERDURE_TRANSPORT=net needs {', '.join(missing)} in the environment; perdure "
                "sets them for the replicas it launches (run this script under perdure)")
        host, port = parse_addr(env[ENV_CONTROL_ADDR])
        client = RelayClient(host, port, job=env["PERDURE_JOB_ID"],
                             replica=env["PERDURE_REPLICA"], launch=env["PERDURE_LAUNCH_ID"],
                             secret=env[ENV_JOB_SECRET])
        return cls(client, elastic=env.get(ENV_RDZV) == "1", local=FileTransport.from_env(env))

    def where(self) -> str:
        return f"the controller's relay at {self.client.host}:{self.client.port}"

    def _call(self, op: str, seconds: float, **args: Any) -> Any:
        return self.client.call(op, args, deadline=time.monotonic() + seconds)

    def _poll(self, op: str, away: Any, **args: Any) -> Any:
        """A read polled in a loop: `away` when the relay cannot be reached (Refused raises)."""
        try:
            return self._call(op, POLL_SECONDS, **args)
        except Refused:
            raise
        except TransportError as exc:
            log.debug("%s: the relay is away: %s", op, exc)
            return away

    # ---- membership rounds and markers ---------------------------------------------------

    def round_doc(self, since: Hashable | None) -> tuple[Hashable | None, Any]:
        reply = self._poll("round", None, since=since)
        if reply is None:  # the relay is away: nothing new can have been published
            return since, None
        stamp = reply.get("stamp")  # JSON has no tuples
        return (tuple(stamp) if isinstance(stamp, list) else stamp), reply.get("doc")

    def mark_ready(self, attempt: int, replica: str, round_no: int) -> None:
        self._call("ready", WRITE_SECONDS, attempt=attempt, round=round_no, pid=os.getpid())

    def ready_round(self, attempt: int, replica: str) -> int | None:
        value = self._poll("ready_round", None, attempt=attempt, replica=replica)
        return None if value is None else int(value)

    def mark_finished(self, attempt: int, replica: str, round_no: int) -> None:
        self._call("finished", WRITE_SECONDS, attempt=attempt, round=round_no)

    def finished(self, attempt: int) -> bool:
        return bool(self._poll("is_finished", False, attempt=attempt))

    def round_store(self, name: str) -> Any:
        from perdure.runtime.transport.netstore import RelayStore

        # Kept here for the life of the process: torch holds only the C++ half of a Python
        # store, and a group using it after the Python object is gone fails "Not implemented".
        store = self._stores.get(name)
        if store is None:
            store = self._stores[name] = RelayStore(self.client, name)
        return store

    # ---- snapshot holders ----------------------------------------------------------------

    def register_holder(self, record: HolderRecord) -> None:
        self._call("holder", WRITE_SECONDS, record=dict(record))

    def holders(self) -> list[HolderRecord]:
        return [h for h in self._poll("holders", []) if isinstance(h, dict)]

    # ---- notices, errors, progress -------------------------------------------------------

    def stop_request(self) -> dict[str, Any] | None:
        try:
            value = self._call("stop", STOP_SECONDS)
        except TransportError:
            return self.local.stop_request()
        return value if isinstance(value, dict) else None

    def write_error(self, payload: dict[str, Any]) -> str | None:
        from perdure.runtime.errorfile import MAX_MESSAGE_CHARS, MAX_TRACEBACK_CHARS

        payload = {**payload,  # as the reader clips them: the end of a traceback matters most
                   "message": str(payload.get("message", ""))[:MAX_MESSAGE_CHARS],
                   "traceback": str(payload.get("traceback", ""))[-MAX_TRACEBACK_CHARS:]}
        if os.environ.get(PROCS_ENV):  # one of several processes: each has its own record
            payload["local_rank"] = int(os.environ.get("LOCAL_RANK", "0") or 0)
        try:
            return str(self._call("error", ERROR_SECONDS, record=payload))
        except TransportError as exc:
            where = self.local.write_error(payload)
            log.warning("error record not delivered to the controller (%s)%s", exc,
                        f"; written to {where}" if where else "")
            return where

    def append_progress(self, lines: list[str]) -> None:
        if not lines:
            return
        with self._unsent_lock:
            if self._unsent + len(lines) > MAX_UNSENT_LINES:
                log.warning("%d progress records dropped: the relay has been away for "
                            "%d unsent ones", len(lines), self._unsent)
                return
            self._unsent += len(lines)
        self._progress_sent = self._progress.submit(lambda: self._send_progress(lines))

    def _send_progress(self, lines: list[str]) -> None:
        try:
            self._send_batches(lines)
        finally:
            with self._unsent_lock:
                self._unsent -= len(lines)

    def _send_batches(self, lines: list[str]) -> None:
        for batch in _batches(lines):
            seq = next(self._seqs)
            while True:
                try:
                    self._call("progress", PROGRESS_SECONDS, seq=seq, lines=batch)
                    break
                except Refused as exc:  # will not change by retrying: say so, go on
                    log.warning("%d progress records refused by the relay: %s", len(batch), exc)
                    break
                except TransportError as exc:  # the relay is down: keep the batch, try again
                    log.debug("progress not delivered yet: %s", exc)
                    time.sleep(0.2)

    def flush_progress(self, timeout: float) -> bool:
        sent = self._progress_sent
        return sent is None or sent.wait(timeout)


def _batches(lines: list[str]) -> Iterator[list[str]]:
    """`lines` in batches under the frame limit; a line too long for one is dropped."""
    batch: list[str] = []
    size = 0
    for line in lines:
        if len(line) >= _BATCH_BYTES:  # nothing reads such a line
            continue
        if batch and size + len(line) >= _BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(line)
        size += len(line) + 8
    if batch:
        yield batch
