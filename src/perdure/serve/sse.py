"""Server-sent event streams: a job's events and a replica's log as they are written.

Each polls, sends what is new with its position as the event id (`Last-Event-ID` resumes), a
keepalive comment when quiet, and an `end` event once the job has ended and all is sent (else
the client would reconnect). A stream ends without `end` when the server stops.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from starlette.responses import StreamingResponse

from perdure.core.states import JobState
from perdure.serve.logs import read_chunk
from perdure.store.sqlite import Store

POLL_SECONDS = 0.25
KEEPALIVE_SECONDS = 15.0


def wants_stream(accept: str) -> bool:
    return "text/event-stream" in accept


def response(stream: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(stream, media_type="text/event-stream",
                             headers={"x-accel-buffering": "no"})


def _message(event: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _ended(store: Store, job_id: str) -> bool:
    row = store.db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
    return row is None or JobState(row[0]).terminal


async def events(store: Callable[[], Store], job_id: str, after: int,
                 stopping: Callable[[], bool]) -> AsyncIterator[bytes]:
    yield b"retry: 1000\n\n"
    last, quiet_since = after, time.monotonic()
    while not stopping():
        s = store()
        ended = _ended(s, job_id)  # read before the events: none can slip in between
        new = s.events(job_id, after=last)
        for e in new:
            yield _message("event", {"id": e.id, "time": e.time, "kind": e.kind,
                                     "message": e.message}, e.id)
            last = e.id
        if ended:
            yield _message("end", {"last": last})
            return
        if new:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > KEEPALIVE_SECONDS:
            yield b": keepalive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(POLL_SECONDS)


async def log_tail(store: Callable[[], Store], job_id: str, path: Path,
                   offset: int | None, stopping: Callable[[], bool]) -> AsyncIterator[bytes]:
    yield b"retry: 1000\n\n"
    quiet_since = time.monotonic()
    while not stopping():
        ended = _ended(store(), job_id)
        chunk = read_chunk(path, offset)
        if offset is not None and chunk.size < offset:  # truncated or replaced: start over
            chunk = read_chunk(path, 0)
        if chunk.text or offset is None:
            yield _message("log", asdict(chunk), chunk.next_offset)
            offset = chunk.next_offset
            quiet_since = time.monotonic()
            if chunk.next_offset < chunk.size:
                continue  # more is waiting: send it at once
        elif ended:
            yield _message("end", {"offset": offset})
            return
        elif time.monotonic() - quiet_since > KEEPALIVE_SECONDS:
            yield b": keepalive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(POLL_SECONDS)
